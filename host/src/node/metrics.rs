//! The node's counters, rendered in the Prometheus text format.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// A monotonically increasing counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

macro_rules! metrics {
    ($($field:ident => $name:literal, $help:literal;)*) => {
        /// Every counter of a node.
        #[derive(Debug, Default)]
        pub struct Metrics { $(pub $field: Counter,)* }

        impl Metrics {
            /// The counters in the Prometheus text format.
            pub fn render_counters(&self, out: &mut String) {
                $(
                    let _ = writeln!(out, "# HELP {} {}", $name, $help);
                    let _ = writeln!(out, "# TYPE {} counter", $name);
                    let _ = writeln!(out, "{} {}", $name, self.$field.get());
                )*
            }
        }
    };
}

metrics! {
    leases_acquired => "chitin_leases_acquired_total", "Leases this node acquired or adopted.";
    leases_lost => "chitin_lease_losses_total", "Leases this node stopped holding (handed over, expired or superseded).";
    handoffs => "chitin_handoffs_total", "Leases this node handed to another node.";
    fenced_commits => "chitin_fenced_commits_total", "Journal appends committed under the lease check.";
    fenced_aborts => "chitin_fenced_aborts_total", "Journal appends aborted because the lease was lost.";
    forwards => "chitin_forwards_total", "Appends forwarded to the shard's holder.";
    outcome_unknown => "chitin_outcome_unknown_total", "Forwarded appends whose outcome was unknown.";
    policy_calls => "chitin_policy_calls_total", "Calls into policy components.";
    policy_errors => "chitin_policy_errors_total", "Policy calls that failed (refusal, trap, timeout, memory).";
}

/// Appends one gauge in the Prometheus text format.
pub fn gauge(out: &mut String, name: &str, help: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
    let _ = writeln!(out, "{name} {value}");
}
