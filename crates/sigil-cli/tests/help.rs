//! Every command's `--help`, as the binary prints it: each runs, and none shows a line break
//! where its text meant something else (clap reads `{n}` in help text as a line break).

mod common;

use common::sigil;

#[test]
fn every_commands_help_prints_and_diet_shows_its_placeholder() {
    let top = sigil(&["--help"]);
    assert!(top.status.success());
    let top = String::from_utf8(top.stdout).unwrap();
    let commands: Vec<&str> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    for c in ["server", "sensor", "diet", "backup", "soak"] {
        assert!(commands.contains(&c), "{c} missing from: {top}");
    }
    for c in &commands {
        let out = sigil(&[c, "--help"]);
        assert!(out.status.success(), "sigil {c} --help");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("Usage: sigil"), "{c}: {text}");
    }
    let diet = String::from_utf8(sigil(&["diet", "--help"]).stdout).unwrap();
    let message = diet
        .lines()
        .skip_while(|l| !l.contains("--message"))
        .take(2)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        message.contains("each `%n` in it is replaced by the message number"),
        "{message}"
    );
    assert!(diet.contains("[default: \"message %n\"]"), "{diet}");
}
