//! The C side: tests/c/test_api.c calls every exported function with NULL pointers, short
//! buffers and bad lengths, linked against the host libsigil.a and run under
//! AddressSanitizer and UndefinedBehaviorSanitizer.

mod support;

use std::path::PathBuf;
use std::process::Command;
use support::{crate_dir, run};

/// The host static library cargo built for this test run: the newest `libsigil-*.a` beside
/// the test binary (cargo builds the library, all its crate types, before its tests).
fn host_library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    std::fs::read_dir(deps)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("libsigil-") && name.ends_with(".a")
        })
        .max_by_key(|p| p.metadata().unwrap().modified().unwrap())
        .expect("libsigil-*.a next to the test binary")
}

#[test]
fn every_exported_function_refuses_bad_arguments_under_sanitizers() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("test_api");
    run(Command::new("gcc")
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-g"])
        .args(["-fsanitize=address,undefined", "-fno-sanitize-recover=all"])
        .arg(format!("-I{}", crate_dir().join("include").display()))
        .arg(crate_dir().join("tests/c/test_api.c"))
        .arg(host_library())
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&exe));
    let out = run(Command::new(&exe).env("ASAN_OPTIONS", "detect_leaks=1"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    println!("{stdout}");
}

#[cfg(feature = "dtls")]
#[test]
fn the_dtls_client_refuses_bad_arguments_under_sanitizers() {
    let stdout = sanitized("test_dtls");
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    println!("{stdout}");
}

/// Compiles tests/c/`name`.c against the host library under AddressSanitizer and
/// UndefinedBehaviorSanitizer, runs it, and returns what it printed.
#[allow(dead_code)]
fn sanitized(name: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join(name);
    run(Command::new("gcc")
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-g"])
        .args(["-fsanitize=address,undefined", "-fno-sanitize-recover=all"])
        .arg(format!("-I{}", crate_dir().join("include").display()))
        .arg(crate_dir().join(format!("tests/c/{name}.c")))
        .arg(host_library())
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&exe));
    let out = run(Command::new(&exe).env("ASAN_OPTIONS", "detect_leaks=1"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}
