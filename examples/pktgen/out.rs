//! pktgen's stdout: `out!` and `outln!`, which write it without ever panicking, and what became
//! of it (a reader that went away, or another write error), which `main` turns into the exit
//! status.
//!
//! Owns: the stdout state and the two macros. Must not: write to stderr but to report a
//! failed write, nor decide what a run does when stdout is gone (`compare.rs`, `main.rs`).

use std::sync::atomic::{AtomicU8, Ordering};

/// What became of stdout: [`STDOUT_OK`], [`STDOUT_GONE`] (a write found its reader gone, as
/// in `pktgen ... | head`) or [`STDOUT_FAILED`] (any other write error). Once it is not OK,
/// nothing more is written, a `--compare` stops before its next cell, and `main` exits with
/// 141 (what a shell reports for a writer killed by `SIGPIPE`) or 1. A single run still runs
/// to its end: its cleanup (the namespaces of `--veth`) happens as on every other exit path.
pub(crate) static STDOUT: AtomicU8 = AtomicU8::new(STDOUT_OK);
pub(crate) const STDOUT_OK: u8 = 0;
pub(crate) const STDOUT_GONE: u8 = 1;
pub(crate) const STDOUT_FAILED: u8 = 2;

/// `print!` that never panics on a closed stdout (see [`STDOUT`]).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::write_stdout(format_args!($($arg)*))
    };
}

/// `println!` that never panics on a closed stdout (see [`STDOUT`]).
macro_rules! outln {
    () => {
        $crate::out::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Writes to stdout unless an earlier write failed; a failure is recorded in [`STDOUT`], and
/// one that is not a broken pipe is reported on stderr.
pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    if !stdout_ok() {
        return;
    }
    if let Err(e) = std::io::stdout().lock().write_fmt(args) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            STDOUT.store(STDOUT_GONE, Ordering::Relaxed);
        } else {
            STDOUT.store(STDOUT_FAILED, Ordering::Relaxed);
            eprintln!("pktgen: cannot write to stdout: {e}");
        }
    }
}

/// Whether stdout still takes output.
pub(crate) fn stdout_ok() -> bool {
    STDOUT.load(Ordering::Relaxed) == STDOUT_OK
}
