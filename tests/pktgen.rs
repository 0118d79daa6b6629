//! Runs the `pktgen` example binary the way a user would and checks what it prints: JSON
//! figures for every strategy and qdisc on the null driver (packets sent, conservation, the
//! documented fields), and the one-line error with exit code 2 for bad options.

use std::process::{Command, Output};

/// The example binary: cargo builds examples for a plain `cargo test`; when only this test was
/// asked for, build it the same way (same profile, same target directory).
fn pktgen() -> Command {
    static BUILT: std::sync::Once = std::sync::Once::new();
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>");
    let path = profile_dir.join("examples").join("pktgen");
    BUILT.call_once(|| {
        let mut build = Command::new(env!("CARGO"));
        build.args(["build", "--quiet", "--example", "pktgen"]);
        if profile_dir.ends_with("release") {
            build.arg("--release");
        }
        build.current_dir(env!("CARGO_MANIFEST_DIR"));
        let status = build
            .status()
            .expect("running cargo build --example pktgen");
        assert!(status.success(), "building the pktgen example failed");
    });
    assert!(
        path.exists(),
        "pktgen example not built at {}",
        path.display()
    );
    Command::new(path)
}

fn run(args: &[&str]) -> Output {
    pktgen().args(args).output().expect("running pktgen")
}

/// Runs pktgen with `args`, asserts that it succeeded, and returns its standard output.
fn run_ok(args: &[&str]) -> String {
    let out = run(args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{args:?}: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The rows of `stdout`'s markdown tables for one producer with `cells` cells each (which
/// tells one table from another).
fn one_producer_rows(stdout: &str, cells: usize) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| {
            l.starts_with("| 1 |") && l.trim().trim_matches('|').split('|').count() == cells
        })
        .collect()
}

/// A tiny extractor for the flat JSON objects pktgen prints: `"key":value`.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("\"{key}\":");
    let start = line.find(&pat)? + pat.len();
    let rest = &line[start..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim_matches('"'))
}

fn num(line: &str, key: &str) -> f64 {
    field(line, key)
        .unwrap_or_else(|| panic!("field {key} missing in {line}"))
        .parse()
        .unwrap_or_else(|_| panic!("field {key} not a number in {line}"))
}

#[test]
fn json_run_for_every_strategy_and_qdisc() {
    for strategy in ["busylock", "defer", "nolock"] {
        for qdisc in ["pfifo", "pfifo_fast", "fq"] {
            let stdout = run_ok(&[
                "--duration",
                "1",
                "--json",
                "--threads",
                "3",
                "--flows",
                "8",
                "--strategy",
                strategy,
                "--qdisc",
                qdisc,
            ]);
            let line = stdout.lines().last().expect("one JSON line");
            for key in [
                "offered",
                "sent",
                "dropped",
                "pps",
                "cpu_ns_per_pkt",
                "strategy",
                "threads",
            ] {
                assert!(field(line, key).is_some(), "{key} missing: {line}");
            }
            assert_eq!(field(line, "strategy"), Some(strategy));
            assert_eq!(field(line, "qdisc"), Some(qdisc));
            let (offered, sent, dropped, queued) = (
                num(line, "offered"),
                num(line, "sent"),
                num(line, "dropped"),
                num(line, "queued"),
            );
            assert!(sent > 0.0, "{strategy}/{qdisc}: nothing sent: {line}");
            assert_eq!(offered, sent + dropped + queued, "conservation: {line}");
            assert_eq!(queued, 0.0, "queue not flushed: {line}");
            assert!(num(line, "pps") > 0.0 && num(line, "cpu_ns_per_pkt") > 0.0);
        }
    }
}

#[test]
fn compare_prints_one_json_cell_per_strategy_and_thread_count() {
    let stdout = run_ok(&["--compare", "1,2", "--duration", "0.3", "--json"]);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 12, "2 thread counts x 6 contenders: {stdout}");
    for name in ["busylock", "defer", "nolock", "mutex", "segqueue", "bound"] {
        for t in ["1", "2"] {
            assert!(
                lines
                    .iter()
                    .any(|l| field(l, "strategy") == Some(name) && field(l, "threads") == Some(t)),
                "no cell for {name} at {t} threads"
            );
        }
    }
    for l in &lines {
        assert_eq!(
            num(l, "offered"),
            num(l, "sent") + num(l, "dropped") + num(l, "queued")
        );
    }
}

/// `--repeat`: every cell once per round (rounds numbered in the JSON), and a table whose
/// ratios are the median and range of the in-round ratios.
#[test]
fn compare_repeats_rounds_and_tables_the_ratio_ranges() {
    let stdout = run_ok(&[
        "--compare",
        "1",
        "--repeat",
        "2",
        "--duration",
        "0.2",
        "--json",
    ]);
    for round in ["0", "1"] {
        let cells = stdout
            .lines()
            .filter(|l| field(l, "round") == Some(round))
            .count();
        assert_eq!(cells, 6, "round {round}: one cell per contender: {stdout}");
    }
    assert!(
        stdout.lines().all(|l| l.contains("\"pingpong_ns\":")),
        "every cell says the machine's state: {stdout}"
    );
    let stdout = run_ok(&["--compare", "1", "--repeat", "2", "--duration", "0.2"]);
    // The contenders' table (nine cells a row), then the machine-state table (a cell a round).
    let rows = one_producer_rows(&stdout, 9);
    assert_eq!(
        rows.len(),
        6,
        "one row per contender and the bound: {stdout}"
    );
    for row in rows {
        // "| 1 | defer | owner | Mpps | drops | cpu | 1.00x (1.00–1.00) | 0.93x (0.90–0.96)
        // | 0.91x (0.88–0.95) |"
        assert_eq!(row.matches('–').count(), 3, "three ratio ranges: {row}");
    }
    assert!(stdout.contains("ping-pong before each group"), "{stdout}");
    let states = one_producer_rows(&stdout, 3);
    assert_eq!(states.len(), 1, "one state row, a cell per round: {stdout}");
}

/// `--slice`: a cell's `--duration` runs in slices, the contenders taking turns, each slice a
/// round of its own (numbered on from one `--repeat` to the next); the machine's state is
/// probed once per thread count and `--repeat`. `--slice 0` runs each cell whole.
#[test]
fn compare_slices_each_cell_into_rounds() {
    let rounds = |args: &[&str]| {
        let stdout = run_ok(args);
        let mut per_round = std::collections::BTreeMap::<String, usize>::new();
        for l in stdout.lines() {
            *per_round
                .entry(field(l, "round").expect("a round").to_string())
                .or_default() += 1;
            assert_eq!(
                num(l, "offered"),
                num(l, "sent") + num(l, "dropped") + num(l, "queued"),
                "{l}"
            );
        }
        per_round
    };
    let sliced = rounds(&[
        "--compare",
        "1",
        "--duration",
        "0.4",
        "--slice",
        "0.2",
        "--repeat",
        "2",
        "--json",
    ]);
    assert_eq!(
        sliced.keys().map(String::as_str).collect::<Vec<_>>(),
        ["0", "1", "2", "3"],
        "two slices in each of two repeats: {sliced:?}"
    );
    assert!(
        sliced.values().all(|&n| n == 6),
        "every contender in every slice: {sliced:?}"
    );
    let whole = rounds(&[
        "--compare",
        "1",
        "--duration",
        "0.4",
        "--slice",
        "0",
        "--json",
    ]);
    assert_eq!(whole.len(), 1, "one round without slicing: {whole:?}");
    let stdout = run_ok(&["--compare", "1", "--duration", "0.4", "--slice", "0.2"]);
    assert!(stdout.contains("in 2 slice(s) of 0.20 s"), "{stdout}");
    let states = one_producer_rows(&stdout, 2);
    assert_eq!(
        states.len(),
        1,
        "one probe for the thread count's slices: {stdout}"
    );
}

/// Bursts through `xmit_bulk` (and the peers' burst paths), with a pool so small that the
/// producers' partial bursts together hold most of it: every cell sends and conserves.
/// Runs `--compare 1,4` (or `counts`) on 128 frames with `extra` options and checks every
/// cell: `key` reads `value`, something was sent, and offered = sent + dropped + queued.
fn compare_conserves(counts: &str, extra: &[&str], key: &str, value: &str) {
    let mut args = vec![
        "--compare",
        counts,
        "--frames",
        "128",
        "--duration",
        "0.3",
        "--json",
    ];
    args.extend_from_slice(extra);
    let stdout = run_ok(&args);
    assert_eq!(
        stdout.lines().count(),
        12,
        "two counts x six contenders: {stdout}"
    );
    for l in stdout.lines() {
        assert_eq!(field(l, key), Some(value), "{l}");
        assert!(num(l, "sent") > 0.0, "nothing sent: {l}");
        assert_eq!(
            num(l, "offered"),
            num(l, "sent") + num(l, "dropped") + num(l, "queued"),
            "conservation: {l}"
        );
    }
}

#[test]
fn burst_runs_conserve_for_every_contender() {
    compare_conserves("1,4", &["--burst", "32"], "burst", "32");
}

/// Producers out of frames sleep until one of theirs is freed: 8 of them on 128 frames park
/// all the time, and a lost wake-up would stall a producer (each nap is 1 ms, so the run still
/// ends) while a lost frame would break conservation.
#[test]
fn parked_producers_conserve_for_every_contender() {
    compare_conserves("1,8", &["--park"], "park", "true");
}

/// Per-CPU frames (`--pool percpu`: `Pool::alloc`, no handle) through every contender, one
/// packet a call and in bursts, whose sent batches go home in runs (`Skb::free_bulk`).
#[test]
fn per_cpu_frames_conserve_for_every_contender() {
    compare_conserves("1,4", &["--pool", "percpu"], "pool", "percpu");
    compare_conserves(
        "1,4",
        &["--pool", "percpu", "--burst", "32"],
        "pool",
        "percpu",
    );
}

#[test]
fn bad_options_exit_2_with_a_one_line_error_naming_the_option() {
    for (args, option, accepted) in [
        (&["--strategy", "spin"][..], "--strategy", "busylock"),
        (&["--qdisc", "htb"][..], "--qdisc", "pfifo_fast"),
        (&["--driver", "tap:eth0"][..], "--driver", "null"),
        (&["--duration", "0"][..], "--duration", "seconds"),
        (&["--size", "9000"][..], "--size", "1792"),
        (&["--threads", "0"][..], "--threads", "1"),
        (&["--slice", "0.01"][..], "--slice", "no slicing"),
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?} should exit 2");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{args:?}: not one line: {stderr}");
        assert!(
            lines[0].contains(option),
            "{args:?}: option not named: {stderr}"
        );
        assert!(
            lines[0].contains(accepted),
            "{args:?}: accepted values not named: {stderr}"
        );
    }
}

/// Runs pktgen with `args` and its stdout on a pipe whose reading end is already closed (a
/// reader that went away, as `head` does), so that its first write fails; returns the output
/// (stderr only) and how long pktgen ran.
fn run_with_reader_gone(args: &[&str]) -> (Output, std::time::Duration) {
    use std::os::fd::{FromRawFd, OwnedFd};
    // First, since the first call may build the example (seconds), outside the timing.
    let mut cmd = pktgen();
    cmd.args(args);
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors `pipe2` writes.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just created by `pipe2` and are owned by nothing else.
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(reader);
    let start = std::time::Instant::now();
    let out = cmd.stdout(writer).output().expect("running pktgen");
    (out, start.elapsed())
}

#[test]
fn a_reader_that_goes_away_ends_the_output_with_status_141_not_a_panic() {
    let (out, _) = run_with_reader_gone(&["--threads", "1", "--duration", "0.5"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // 141: what a shell reports for a writer killed by SIGPIPE (`yes | head`).
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_stdout_that_refuses_writes_is_reported_once_and_exits_1() {
    // /dev/full: every write fails with ENOSPC, an error other than a broken pipe.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("opening /dev/full");
    let out = pktgen()
        .args(["--threads", "1", "--duration", "0.5"])
        .stdout(full)
        .output()
        .expect("running pktgen");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "not one line: {stderr}");
    assert!(
        lines[0].contains("cannot write to stdout"),
        "cause not named: {stderr}"
    );
}

#[test]
fn a_compare_whose_reader_went_away_runs_no_cell() {
    // Six contenders at two thread counts, a second each: 12 s if every cell ran. The header
    // fails to write, and the run stops before its first state probe (whose time has no bound
    // on a loaded machine) and its first cell. The JSON lines take the same check before each
    // cell.
    let (out, took) = run_with_reader_gone(&["--compare", "1,2", "--duration", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        took < std::time::Duration::from_secs(12),
        "every cell ran ({took:?}) though nobody read them"
    );
}

#[test]
fn help_explains_every_option() {
    let help = run_ok(&["--help"]);
    for opt in [
        "--driver",
        "--threads",
        "--strategy",
        "--qdisc",
        "--flows",
        "--size",
        "--rate",
        "--duration",
        "--burst",
        "--burst-limit",
        "--overflow",
        "--compare",
        "--repeat",
        "--slice",
        "--json",
    ] {
        assert!(help.contains(opt), "--help does not mention {opt}");
    }
}

#[test]
fn veth_run_accounts_for_every_datagram_it_sends() {
    if let Err(why) = xsk_tx::netns::available() {
        // Visible skip; CI sets LOCKLESS_XMIT_REQUIRE_NETNS=1, which turns it into a failure.
        xsk_tx::netns::skip("pktgen --veth", &why);
        return;
    }
    // Frames through pool handles, then from the per-CPU caches (their completions go home
    // to the CPU that allocated them).
    for pool in ["owner", "percpu"] {
        let stdout = run_ok(&[
            "--veth",
            "--duration",
            "2",
            "--json",
            "--threads",
            "2",
            "--pool",
            pool,
        ]);
        let line = stdout.lines().last().expect("one JSON line");
        assert_eq!(field(line, "pool"), Some(pool), "{line}");
        let (sent, received) = (num(line, "sent"), num(line, "received"));
        assert!(
            sent > 0.0 && received > 0.0,
            "nothing sent or received: {line}"
        );
        // On a busy machine the receiving thread can fall behind: the kernel then drops and
        // counts (`kernel_drops`), and every datagram is received or in one of its counters.
        let (no_room, veth) = (num(line, "udp_no_room"), num(line, "veth"));
        assert_eq!(
            num(line, "udp_other"),
            0.0,
            "UDP errors in the peer: {line}"
        );
        assert_eq!(received + no_room + veth, sent, "lost on the veth: {line}");
        assert_eq!(num(line, "dropped"), 0.0, "{line}");
    }
}
