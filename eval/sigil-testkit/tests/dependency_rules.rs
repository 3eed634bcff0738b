//! The workspace's dependency rules (docs/architecture.md, "Dependency rules"), read from
//! `cargo metadata`: a change that breaks one fails here, not in review.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// The protocol and data crates (no_std, sans-IO) and the sigil crates each may use.
/// Nothing outside this table is allowed to a core.
const CORES: &[(&str, &[&str])] = &[
    ("sigil-time", &[]),
    ("sigil-crypto", &[]),
    ("sigil-identity", &["sigil-crypto"]),
    ("sigil-coap", &["sigil-time"]),
    ("sigil-freshness", &[]),
    ("sigil-objects", &["sigil-crypto", "sigil-identity"]),
    (
        "sigil-dtls",
        &["sigil-crypto", "sigil-identity", "sigil-time"],
    ),
    ("sigil-diet", &["sigil-crypto", "sigil-time"]),
    (
        "sigil-dtls-coap",
        &["sigil-coap", "sigil-crypto", "sigil-dtls", "sigil-time"],
    ),
    (
        "sigil-ace",
        &[
            "sigil-crypto",
            "sigil-identity",
            "sigil-objects",
            "sigil-time",
        ],
    ),
    (
        "sigil-device",
        &[
            "sigil-ace",
            "sigil-coap",
            "sigil-crypto",
            "sigil-identity",
            "sigil-objects",
            "sigil-freshness",
            "sigil-time",
        ],
    ),
];

/// The measurement side: may depend on anything, nothing in the product may depend on it.
const EVAL: &[&str] = &[
    "sigil-netsim",
    "sigil-devbench",
    "sigil-bench",
    "sigil-testkit",
];

/// Edges that break a rule today and the change that removes each. Empty when the tree
/// follows every rule.
const KNOWN_EXCEPTIONS: &[(&str, &str)] = &[];

struct Package {
    manifest: String,
    /// Sigil crates this one links (normal and build dependencies).
    links: BTreeSet<String>,
    /// Sigil crates only its tests use.
    dev: BTreeSet<String>,
    rust_version: Option<String>,
}

/// `cargo metadata` of the workspace (offline: the build before the tests fetched everything).
fn metadata(extra: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--offline"])
        .args(extra)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn workspace() -> BTreeMap<String, Package> {
    let v = metadata(&["--no-deps"]);
    let mut ws = BTreeMap::new();
    for p in v["packages"].as_array().unwrap() {
        let mut links = BTreeSet::new();
        let mut dev = BTreeSet::new();
        for d in p["dependencies"].as_array().unwrap() {
            let name = d["name"].as_str().unwrap();
            if !name.starts_with("sigil-") {
                continue;
            }
            match d["kind"].as_str() {
                Some("dev") => dev.insert(name.to_string()),
                _ => links.insert(name.to_string()),
            };
        }
        ws.insert(
            p["name"].as_str().unwrap().to_string(),
            Package {
                manifest: p["manifest_path"].as_str().unwrap().to_string(),
                links,
                dev,
                rust_version: p["rust_version"].as_str().map(str::to_string),
            },
        );
    }
    ws
}

fn exception(from: &str, to: &str) -> bool {
    KNOWN_EXCEPTIONS.contains(&(from, to))
}

#[test]
fn cores_depend_only_on_the_cores_below_them() {
    let ws = workspace();
    for (core, allowed) in CORES {
        let p = ws
            .get(*core)
            .unwrap_or_else(|| panic!("{core} is not in the workspace"));
        for d in &p.links {
            assert!(
                allowed.contains(&d.as_str()) || exception(core, d),
                "{core} depends on {d}; a core may use only {allowed:?}"
            );
        }
    }
}

#[test]
fn the_server_uses_cores_only() {
    let ws = workspace();
    let cores: BTreeSet<&str> = CORES.iter().map(|c| c.0).collect();
    for d in &ws["sigil-server"].links {
        assert!(
            (cores.contains(d.as_str()) && d != "sigil-device") || exception("sigil-server", d),
            "sigil-server depends on {d}: the server uses cores only, never the device or a client"
        );
    }
}

#[test]
fn the_client_library_uses_cores_only() {
    let ws = workspace();
    let cores: BTreeSet<&str> = CORES.iter().map(|c| c.0).collect();
    for d in &ws["sigil-client"].links {
        assert!(
            (cores.contains(d.as_str()) && d != "sigil-device") || exception("sigil-client", d),
            "sigil-client depends on {d}: the client uses cores only, never the server"
        );
    }
}

#[test]
fn the_c_library_wraps_no_std_cores_only() {
    let ws = workspace();
    let cores: BTreeSet<&str> = CORES.iter().map(|c| c.0).collect();
    for d in &ws["sigil-c"].links {
        assert!(
            cores.contains(d.as_str()) || exception("sigil-c", d),
            "sigil-c depends on {d}: the C library wraps the no_std cores only"
        );
    }
}

#[test]
fn the_cli_drives_server_client_and_device() {
    let ws = workspace();
    let cli = &ws["sigil-cli"].links;
    for needed in ["sigil-server", "sigil-client", "sigil-device"] {
        assert!(cli.contains(needed), "sigil-cli no longer uses {needed}");
    }
}

#[test]
fn nothing_in_the_product_links_the_measurement_side() {
    let ws = workspace();
    for (name, p) in &ws {
        if EVAL.contains(&name.as_str()) {
            continue;
        }
        for d in &p.links {
            assert!(
                !EVAL.contains(&d.as_str()),
                "{name} links {d}, which belongs to the measurement side"
            );
        }
        for d in &p.dev {
            assert!(
                !EVAL.contains(&d.as_str()) || d == "sigil-testkit",
                "{name} uses {d} in its tests; only sigil-testkit is a test dependency"
            );
        }
    }
}

#[test]
fn every_crate_is_where_its_side_says() {
    let ws = workspace();
    assert_eq!(
        ws.len(),
        // The drivers: sigil-server, sigil-client, sigil-cli and the C library, sigil-c.
        CORES.len() + EVAL.len() + 4,
        "a crate is in neither table: {:?}",
        ws.keys().collect::<Vec<_>>()
    );
    for (name, p) in &ws {
        let side = if EVAL.contains(&name.as_str()) {
            "/eval/"
        } else {
            "/crates/"
        };
        assert!(
            p.manifest.contains(&format!("{side}{name}/")),
            "{name} lives at {}, expected under {side}",
            p.manifest
        );
    }
}

/// The oldest Rust Sigil's own code builds with (`Option::is_none_or` is 1.82).
const CODE_NEEDS: (u32, u32) = (1, 82);

fn version(v: &str) -> (u32, u32) {
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// For every workspace crate, the newest `rust-version` among what it links (normal and build
/// dependencies, transitively, for any target) in the locked dependency graph.
fn needed_by_dependencies() -> BTreeMap<String, ((u32, u32), String)> {
    let v = metadata(&["--locked"]);
    let packages: BTreeMap<&str, &serde_json::Value> = v["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p))
        .collect();
    let links: BTreeMap<&str, Vec<&str>> = v["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let deps = n["deps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| {
                    d["dep_kinds"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|k| k["kind"].is_null() || k["kind"] == "build")
                })
                .map(|d| d["pkg"].as_str().unwrap())
                .collect();
            (n["id"].as_str().unwrap(), deps)
        })
        .collect();
    let mut needs = BTreeMap::new();
    for member in v["workspace_members"].as_array().unwrap() {
        let member = member.as_str().unwrap();
        let (mut seen, mut todo) = (BTreeSet::new(), vec![member]);
        let mut newest = ((0, 0), String::from("nothing"));
        while let Some(id) = todo.pop() {
            for &d in &links[id] {
                if seen.insert(d) {
                    todo.push(d);
                    let p = packages[d];
                    let r = p["rust_version"].as_str().map(version).unwrap_or((0, 0));
                    if r > newest.0 {
                        newest = (r, p["name"].as_str().unwrap().to_string());
                    }
                }
            }
        }
        needs.insert(
            packages[member]["name"].as_str().unwrap().to_string(),
            newest,
        );
    }
    needs
}

#[test]
fn every_crate_is_a_workspace_dependency() {
    let ws = workspace();
    let root =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml")).unwrap();
    for name in ws.keys() {
        assert!(
            root.lines().any(|l| l.starts_with(&format!("{name} = {{"))),
            "{name} is missing from [workspace.dependencies]"
        );
    }
}

#[test]
fn every_rust_version_is_true() {
    let ws = workspace();
    let needs = needed_by_dependencies();
    for (name, p) in &ws {
        let declared = version(p.rust_version.as_deref().expect("a rust-version"));
        let (deps, by) = &needs[name];
        let true_value = CODE_NEEDS.max(*deps);
        assert_eq!(
            declared, true_value,
            "{name} declares rust-version {declared:?}, but it needs {true_value:?} \
             (its own code {CODE_NEEDS:?}, {by} {deps:?})"
        );
    }
    // The toolchain this runs on meets every declared value.
    let rustc = Command::new("rustc").arg("--version").output().unwrap();
    let have = version(
        String::from_utf8_lossy(&rustc.stdout)
            .split_whitespace()
            .nth(1)
            .unwrap(),
    );
    for (name, p) in &ws {
        let declared = version(p.rust_version.as_deref().unwrap());
        assert!(
            have >= declared,
            "{name} needs {declared:?}, rustc is {have:?}"
        );
    }
}
