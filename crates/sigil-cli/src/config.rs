//! `sigil server --config FILE`: a TOML file of the server's settings. Each key is the long
//! name of one of its flags (`listen`, `dtls-listen`, `authorize-reads`; `_` may stand for
//! `-`), each value what the flag takes (a string, number or boolean; a flag that takes no
//! value is set with `true`). The file's settings go in front of the command line's flags,
//! which therefore override them; an unknown key is refused by name.

use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::Path;

/// The command line with the settings of `server --config FILE` put in front of the
/// server's own flags. Any other command line comes back unchanged.
pub fn expand(args: Vec<OsString>, server: &clap::Command) -> Result<Vec<OsString>> {
    let Some(at) = server_position(&args) else {
        return Ok(args);
    };
    let Some(file) = config_file(&args[at + 1..]) else {
        return Ok(args);
    };
    let settings = read(Path::new(&file), server)?;
    let mut out: Vec<OsString> = args[..=at].to_vec();
    out.extend(settings.into_iter().map(OsString::from));
    out.extend(args[at + 1..].iter().cloned());
    Ok(out)
}

/// Where the `server` subcommand is: the first word that is not a global option or its
/// value.
fn server_position(args: &[OsString]) -> Option<usize> {
    let mut i = 1;
    while i < args.len() {
        let a = args[i].to_str()?;
        match a {
            "--log" => i += 2,
            _ if a.starts_with('-') => i += 1,
            "server" => return Some(i),
            _ => return None,
        }
    }
    None
}

/// The value of `--config FILE` or `--config=FILE` among the server's arguments.
fn config_file(args: &[OsString]) -> Option<OsString> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--" {
            return None;
        }
        if a == "--config" {
            return it.next().cloned();
        }
        if let Some(v) = a.to_str().and_then(|a| a.strip_prefix("--config=")) {
            return Some(v.into());
        }
    }
    None
}

/// The flags the file at `path` stands for, checked against `server`'s arguments.
pub fn read(path: &Path, server: &clap::Command) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| anyhow::anyhow!("{}: {e}", path.display()))?;
    let known: Vec<(String, bool)> = server
        .get_arguments()
        .filter_map(|a| {
            let long = a.get_long()?;
            let takes_value = a.get_action().takes_values();
            Some((long.to_string(), takes_value))
        })
        .filter(|(long, _)| long != "config" && long != "help")
        .collect();
    let mut out = Vec::new();
    for (key, value) in table {
        let name = key.replace('_', "-");
        let Some((_, takes_value)) = known.iter().find(|(l, _)| *l == name) else {
            bail!(
                "{}: unknown key '{key}' (the keys are the long flags of `sigil server`, e.g. listen, db, retain; see `sigil server --help`)",
                path.display()
            );
        };
        let flag = format!("--{name}");
        match (&value, takes_value) {
            (toml::Value::Boolean(true), false) => out.push(flag),
            (toml::Value::Boolean(false), false) => {}
            (_, false) => bail!(
                "{}: '{key}' is a switch: give it true or false",
                path.display()
            ),
            (toml::Value::String(s), true) => out.push(format!("{flag}={s}")),
            (toml::Value::Integer(n), true) => out.push(format!("{flag}={n}")),
            (toml::Value::Float(x), true) => out.push(format!("{flag}={x}")),
            (toml::Value::Boolean(b), true) => out.push(format!("{flag}={b}")),
            (_, true) => bail!(
                "{}: '{key}' takes a string, number or boolean",
                path.display()
            ),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction, Command};

    fn server() -> Command {
        Command::new("server")
            .arg(Arg::new("config").long("config"))
            .arg(Arg::new("listen").long("listen"))
            .arg(Arg::new("max_ahead").long("max-ahead"))
            .arg(
                Arg::new("no_dtls")
                    .long("no-dtls")
                    .action(ArgAction::SetTrue),
            )
    }

    fn args(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_file_goes_before_the_command_line() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("s.toml");
        std::fs::write(
            &f,
            "listen = \"localhost:6000\"\nmax_ahead = 5\nno-dtls = true\n",
        )
        .unwrap();
        let line = args(&[
            "sigil",
            "--log",
            "info",
            "server",
            "--config",
            f.to_str().unwrap(),
            "--listen",
            "127.0.0.1:1",
        ]);
        let out = expand(line, &server()).unwrap();
        let out: Vec<&str> = out.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(&out[..4], &["sigil", "--log", "info", "server"]);
        assert!(out[4..7].contains(&"--listen=localhost:6000"));
        assert!(out[4..7].contains(&"--max-ahead=5"));
        assert!(out[4..7].contains(&"--no-dtls"));
        assert_eq!(&out[out.len() - 2..], &["--listen", "127.0.0.1:1"]);
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("s.toml");
        std::fs::write(&f, "listen = \"x:1\"\nlisten-port = 5\n").unwrap();
        let e = read(&f, &server()).unwrap_err().to_string();
        assert!(e.contains("unknown key 'listen-port'"), "{e}");
        std::fs::write(&f, "no-dtls = \"yes\"\n").unwrap();
        let e = read(&f, &server()).unwrap_err().to_string();
        assert!(e.contains("'no-dtls' is a switch"), "{e}");
        std::fs::write(&f, "config = \"other.toml\"\n").unwrap();
        assert!(read(&f, &server()).is_err(), "a file cannot name another");
        std::fs::write(&f, "listen = \n").unwrap();
        assert!(read(&f, &server()).is_err());
    }

    #[test]
    fn other_commands_are_left_alone() {
        let line = args(&["sigil", "sensor", "--config", "x"]);
        assert_eq!(expand(line.clone(), &server()).unwrap(), line);
    }
}
