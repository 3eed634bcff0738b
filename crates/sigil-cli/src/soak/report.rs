//! The soak's report as a person reads it: the load, the newcomers, the tables' peaks and
//! the checks.

use super::*;

pub fn print_report(r: &SoakReport) {
    println!(
        "\nSigil soak: {:.0} s, {} coap:// and {} coaps:// sensors beside every attack",
        r.seconds, r.sensors, r.dtls_sensors
    );
    println!(
        "  readings acknowledged         {:>8}",
        r.readings_acknowledged
    );
    println!("  readings stored               {:>8}", r.readings_stored);
    println!("  verified by the application   {:>8}", r.readings_verified);
    println!(
        "  acknowledged but missing      {:>8}",
        r.acknowledged_but_missing
    );
    println!("  given up by a sensor          {:>8}", r.readings_given_up);
    println!("\nattacks (sent / answered, bytes out / in, largest answer/request):");
    for a in &r.attacks {
        println!(
            "  {:<52} {:>8} / {:<8} {:>10} / {:<10} {:>6.2}",
            a.name, a.datagrams_sent, a.answers, a.bytes_sent, a.bytes_received, a.largest_ratio
        );
        let codes: Vec<String> = a.codes.iter().map(|(c, n)| format!("{c}: {n}")).collect();
        println!("      answers {}", codes.join(", "));
    }
    println!("\nserver memory by its own accounting (peak / budget, bytes):");
    for m in &r.memory {
        println!(
            "  {:<24} {:>10} / {:<10}",
            m.table, m.peak_bytes, m.cap_bytes
        );
    }
    let (peak, cap) = r
        .memory
        .iter()
        .fold((0, 0), |(p, c), m| (p + m.peak_bytes, c + m.cap_bytes));
    println!(
        "  {:<24} {:>10} / {:<10} (sum of the tables' peaks)",
        "all tables", peak, cap
    );
    println!(
        "  process peak RSS (sensors, attackers and server together): {} KiB",
        r.peak_rss_kib
    );
    println!("  log written: {} bytes", r.log_bytes);
    if !r.many_hosts.is_empty() {
        println!("\nmany-hosts attacks (cost to the attacker; to the server, its counters of that kind while all attacks ran):");
        for a in &r.many_hosts {
            let l = &a.load;
            println!("  {}", l.name);
            if let Some(why) = &a.not_run {
                println!("      not run: {why}");
                continue;
            }
            println!(
                "      sent {} datagrams, {} bytes from {} hosts; answered {} datagrams, {} bytes",
                l.datagrams_sent, l.bytes_sent, l.hosts, l.answers, l.bytes_received
            );
            let codes: Vec<String> = l.codes.iter().map(|(c, n)| format!("{c}: {n}")).collect();
            println!("      answers {}", codes.join(", "));
            let server: Vec<String> = a.server.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let whose = if l.name.contains("CryptoDiet") {
                "node"
            } else {
                "server"
            };
            println!("      {whose}: {}", server.join(", "));
        }
        println!("\nnewcomers started during the many-hosts attacks:");
        for n in &r.newcomers {
            match n.first_served_s {
                Some(t) => println!(
                    "  {:<64} first served after {t:.2} s ({} in all)",
                    n.what, n.acknowledged
                ),
                None => println!("  {:<64} never served", n.what),
            }
        }
    }
    println!("\nchecks:");
    for c in &r.checks {
        println!(
            "  [{}] {} ({})",
            match (c.ok, c.enforced) {
                (true, _) => "ok",
                (false, true) => "FAILED",
                (false, false) => "not judged: the soak was too short",
            },
            c.what,
            c.observed
        );
    }
}
