//! Progress of long work (starting a dev cluster, drains, rollouts, chaos
//! runs): a bar on stderr when it is a terminal, plain lines otherwise, so
//! that logs and CI output stay readable.

use std::io::IsTerminal as _;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// One piece of work of `len` steps.
pub struct Progress {
    bar: Option<ProgressBar>,
    what: String,
    len: u64,
    /// Plain mode: the last position printed, so a line is printed per change.
    printed: Mutex<Option<u64>>,
}

impl Progress {
    /// Work of `len` steps, described by `what` ("nodes ready").
    pub fn new(len: u64, what: &str) -> Progress {
        Progress::with_terminal(len, what, std::io::stderr().is_terminal())
    }

    fn with_terminal(len: u64, what: &str, terminal: bool) -> Progress {
        let bar = terminal.then(|| {
            let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {prefix} [{bar:30}] {pos}/{len} {wide_msg} {elapsed}")
                    .expect("a valid template")
                    .progress_chars("=> "),
            );
            bar.set_prefix(what.to_string());
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Progress { bar, what: what.to_string(), len, printed: Mutex::new(None) }
    }

    /// One more step done; `item` names it.
    pub fn inc(&self, item: &str) {
        let pos = match &self.bar {
            Some(bar) => {
                bar.inc(1);
                bar.position()
            }
            None => self.printed.lock().unwrap_or_else(|p| p.into_inner()).map_or(1, |p| p + 1),
        };
        self.set(pos, item);
    }

    /// `pos` steps done; `item`, if not empty, names the latest.
    pub fn set(&self, pos: u64, item: &str) {
        match &self.bar {
            Some(bar) => {
                bar.set_position(pos);
                bar.set_message(item.to_string());
            }
            None => {
                if let Some(line) = self.plain_line(pos, item) {
                    eprintln!("{line}");
                }
            }
        }
    }

    /// The plain line for `pos`, or `None` when that position was printed already.
    fn plain_line(&self, pos: u64, item: &str) -> Option<String> {
        let mut printed = self.printed.lock().unwrap_or_else(|p| p.into_inner());
        if *printed == Some(pos) {
            return None;
        }
        *printed = Some(pos);
        let item = if item.is_empty() { String::new() } else { format!(" ({item})") };
        Some(format!("{}: {pos}/{}{item}", self.what, self.len))
    }

    /// A line of output on stdout, printed above the bar on a terminal.
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| println!("{line}")),
            None => println!("{line}"),
        }
    }

    /// Done; `message` says how it ended.
    pub fn finish(&self, message: &str) {
        match &self.bar {
            Some(bar) => bar.finish_with_message(message.to_string()),
            None => eprintln!("{}: {message}", self.what),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_mode_prints_one_line_per_new_position() {
        let p = Progress::with_terminal(3, "nodes ready", false);
        assert!(p.bar.is_none());
        assert_eq!(p.plain_line(1, "node-01").as_deref(), Some("nodes ready: 1/3 (node-01)"));
        assert_eq!(p.plain_line(1, "node-01"), None);
        assert_eq!(p.plain_line(2, "").as_deref(), Some("nodes ready: 2/3"));
    }
}
