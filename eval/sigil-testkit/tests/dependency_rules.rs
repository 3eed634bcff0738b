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
            // The DTLS server of a sensor serving its own readings (feature `serve-dtls`).
            "sigil-dtls",
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

/// What sigil-testkit's feature `server` (the server harness, for sigil-server's tests) brings
/// in; without the feature the cores' tests that use sigil-testkit build none of it.
const TESTKIT_SERVER: &[&str] = &[
    "sigil-coap",
    "sigil-device",
    "sigil-dtls-coap",
    "sigil-server",
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
    /// Sigil crates it links only when a feature asks for them.
    optional: BTreeSet<String>,
    /// Its features, each with what it turns on.
    features: BTreeMap<String, Vec<String>>,
    /// The features it asks of each sigil crate its tests use.
    dev_features: BTreeMap<String, Vec<String>>,
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
        let mut optional = BTreeSet::new();
        let mut dev_features = BTreeMap::new();
        for d in p["dependencies"].as_array().unwrap() {
            let name = d["name"].as_str().unwrap();
            if !name.starts_with("sigil-") {
                continue;
            }
            let strings = |v: &serde_json::Value| -> Vec<String> {
                v.as_array()
                    .unwrap()
                    .iter()
                    .map(|f| f.as_str().unwrap().to_string())
                    .collect()
            };
            if d["optional"].as_bool() == Some(true) {
                optional.insert(name.to_string());
            }
            match d["kind"].as_str() {
                Some("dev") => {
                    dev_features.insert(name.to_string(), strings(&d["features"]));
                    dev.insert(name.to_string())
                }
                _ => links.insert(name.to_string()),
            };
        }
        let features = p["features"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(f, on)| {
                let on = on.as_array().unwrap().iter();
                (
                    f.clone(),
                    on.map(|x| x.as_str().unwrap().to_string()).collect(),
                )
            })
            .collect();
        ws.insert(
            p["name"].as_str().unwrap().to_string(),
            Package {
                manifest: p["manifest_path"].as_str().unwrap().to_string(),
                links,
                dev,
                optional,
                features,
                dev_features,
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
fn the_testkit_links_the_server_only_behind_its_feature() {
    let ws = workspace();
    let kit = &ws["sigil-testkit"];
    let server = &kit.features["server"];
    for d in TESTKIT_SERVER {
        assert!(
            !kit.links.contains(*d) || kit.optional.contains(*d),
            "sigil-testkit links {d} without asking for it: only its feature `server` may"
        );
        assert!(
            !kit.links.contains(*d) || server.contains(&format!("dep:{d}")),
            "sigil-testkit's feature `server` does not bring in {d}"
        );
    }
    for (f, on) in &kit.features {
        for d in TESTKIT_SERVER {
            assert!(
                f == "server" || !on.contains(&format!("dep:{d}")),
                "sigil-testkit's feature `{f}` brings in {d}; only `server` may"
            );
        }
    }
    // Only the server's tests turn it on; a core's tests build no server.
    for (name, p) in &ws {
        let asks = p
            .dev_features
            .get("sigil-testkit")
            .is_some_and(|f| f.iter().any(|f| f == "server"));
        assert_eq!(
            asks,
            name == "sigil-server",
            "{name}: only sigil-server's tests use sigil-testkit's feature `server`"
        );
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
/// dependencies, transitively, for any target) in the locked dependency graph. Sigil crates it
/// links only behind a feature (`optional`, by crate) are left out: the crates that turn the
/// feature on declare what those need.
fn needed_by_dependencies(
    optional: &BTreeMap<String, BTreeSet<String>>,
) -> BTreeMap<String, ((u32, u32), String)> {
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
        let name = packages[member]["name"].as_str().unwrap();
        let (mut seen, mut todo) = (BTreeSet::new(), vec![member]);
        let mut newest = ((0, 0), String::from("nothing"));
        while let Some(id) = todo.pop() {
            for &d in &links[id] {
                let behind_a_feature = id == member
                    && optional
                        .get(name)
                        .is_some_and(|o| o.contains(packages[d]["name"].as_str().unwrap()));
                if !behind_a_feature && seen.insert(d) {
                    todo.push(d);
                    let p = packages[d];
                    let r = p["rust_version"].as_str().map(version).unwrap_or((0, 0));
                    if r > newest.0 {
                        newest = (r, p["name"].as_str().unwrap().to_string());
                    }
                }
            }
        }
        needs.insert(name.to_string(), newest);
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
    let optional = ws
        .iter()
        .map(|(name, p)| (name.clone(), p.optional.clone()))
        .collect();
    let needs = needed_by_dependencies(&optional);
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
    // A crate that turns on a feature of sigil-testkit's declares what the feature links.
    for (name, p) in &ws {
        if p.dev_features
            .get("sigil-testkit")
            .is_some_and(|f| !f.is_empty())
        {
            let declared = version(p.rust_version.as_deref().unwrap());
            for d in &ws["sigil-testkit"].optional {
                let (deps, by) = &needs[d];
                let own = version(ws[d].rust_version.as_deref().unwrap());
                assert!(
                    declared >= own.max(*deps),
                    "{name} turns on sigil-testkit's features, which link {d} \
                     ({own:?}; {by} {deps:?}), but declares rust-version {declared:?}"
                );
            }
        }
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
