//! The header: generated from the source by cbindgen and checked in; it must not drift, and
//! it must compile as strict C99.

mod support;

use std::process::Command;
use support::{crate_dir, run};

fn generate() -> String {
    let dir = crate_dir();
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).unwrap();
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen")
        .write(&mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn checked_in_header_matches_the_source() {
    let path = crate_dir().join("include/sigil.h");
    let generated = generate();
    if std::env::var_os("SIGIL_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/sigil.h is out of date with the source: run \
         `SIGIL_BLESS=1 cargo test -p sigil-c --test header` and commit it"
    );
}

#[test]
fn header_compiles_as_strict_c99() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("use.c");
    std::fs::write(
        &src,
        "#include \"sigil.h\"\n\
         static sigil_device dev;\n\
         int main(void) {\n\
           sigil_device_config cfg;\n\
           if (sigil_device_config_default(&cfg) != SIGIL_OK) return 1;\n\
           return sizeof dev == SIGIL_DEVICE_SIZE ? 0 : 1;\n\
         }\n",
    )
    .unwrap();
    let include = format!("-I{}", crate_dir().join("include").display());
    for std in ["-std=c99", "-std=c11"] {
        run(Command::new("gcc")
            .args([
                std,
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                &include,
                "-c",
                "use.c",
            ])
            .current_dir(dir.path()));
    }
}
