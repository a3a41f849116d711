//! Checkpoints: a control sequence's progress, next to the config file.
//!
//! `<config>.rollout.json` (for `cluster_config.json`:
//! `cluster_config.json.rollout.json`) holds the sequence (the request, as
//! [`Sequence`]), every planned config (the base first) and how many steps
//! are done. The executor rewrites it after every converged step. Running the
//! same request again resumes where it stopped; a different request is
//! refused while it is unfinished ([`decide`]), so at most two versions are
//! ever live.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::plan::{Plan, Sequence, Step};
use crate::topology::model::{ClusterConfig, LoadError};

/// The format of the checkpoint file.
pub(crate) const FORMAT: u32 = 1;

/// The checkpoint file of the config file at `config`.
pub(crate) fn path_for(config: &Path) -> PathBuf {
    let mut name = config.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| "cluster_config.json".into());
    name.push(".rollout.json");
    config.with_file_name(name)
}

/// One planned config in the file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointStep {
    pub version: u64,
    pub description: String,
    pub bake_before: bool,
    /// The whole config, as `cluster_config.json` writes it.
    pub config: serde_json::Value,
}

/// A control sequence in progress (or finished).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    pub format: u32,
    pub sequence: Sequence,
    /// The command that starts and resumes it.
    pub command: String,
    pub base_version: u64,
    pub base: serde_json::Value,
    pub steps: Vec<CheckpointStep>,
    /// Steps done: `steps[..done]` converged on every node.
    pub done: usize,
    /// When the file was last written (RFC 3339, UTC).
    pub updated_at: String,
}

/// Why a checkpoint could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot read the checkpoint `{path}`: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("cannot write the checkpoint `{path}`: {source}")]
    Write { path: String, source: std::io::Error },
    #[error(
        "the checkpoint `{path}` is not readable ({message}); move it aside only if no sequence is in progress (`chitin cluster get-config` shows each node's version)"
    )]
    Malformed { path: String, message: String },
}

fn config_value(c: &ClusterConfig) -> serde_json::Value {
    serde_json::from_str(&c.to_json()).expect("a config is JSON")
}

fn config_from(v: &serde_json::Value) -> Result<ClusterConfig, LoadError> {
    ClusterConfig::from_json(&v.to_string())
}

impl Checkpoint {
    /// A new checkpoint of `plan`, nothing done.
    pub fn new(sequence: Sequence, plan: &Plan) -> Checkpoint {
        Checkpoint {
            format: FORMAT,
            command: sequence.to_string(),
            sequence,
            base_version: plan.base.version,
            base: config_value(&plan.base),
            steps: plan
                .steps
                .iter()
                .map(|s| CheckpointStep {
                    version: s.config.version,
                    description: s.description.clone(),
                    bake_before: s.bake_before,
                    config: config_value(&s.config),
                })
                .collect(),
            done: 0,
            updated_at: now(),
        }
    }

    /// The plan back, parsed.
    pub fn plan(&self) -> Result<Plan, LoadError> {
        Ok(Plan {
            base: config_from(&self.base)?,
            steps: self
                .steps
                .iter()
                .map(|s| {
                    Ok(Step { config: config_from(&s.config)?, description: s.description.clone(), bake_before: s.bake_before })
                })
                .collect::<Result<_, LoadError>>()?,
        })
    }

    pub fn is_finished(&self) -> bool {
        self.done >= self.steps.len()
    }

    /// The version the cluster runs once every done step converged.
    pub fn done_version(&self) -> u64 {
        if self.done == 0 { self.base_version } else { self.steps[self.done - 1].version }
    }

    /// The version of the last step.
    pub fn final_version(&self) -> u64 {
        self.steps.last().map_or(self.base_version, |s| s.version)
    }

    /// Reads the checkpoint of `config`, if there is one.
    pub fn load(config: &Path) -> Result<Option<Checkpoint>, CheckpointError> {
        let path = path_for(config);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(CheckpointError::Read { path: path.display().to_string(), source }),
        };
        let malformed = |message: String| CheckpointError::Malformed { path: path.display().to_string(), message };
        let cp: Checkpoint = serde_json::from_str(&text).map_err(|e| malformed(e.to_string()))?;
        if cp.format != FORMAT {
            return Err(malformed(format!("format {} where this chitin writes {FORMAT}", cp.format)));
        }
        if cp.done > cp.steps.len() {
            return Err(malformed(format!("{} step(s) done of {}", cp.done, cp.steps.len())));
        }
        cp.plan().map_err(|e| malformed(format!("a planned config: {e}")))?;
        Ok(Some(cp))
    }

    /// Writes the checkpoint of `config` atomically (temporary file, fsync, rename).
    pub fn save(&mut self, config: &Path) -> Result<(), CheckpointError> {
        self.updated_at = now();
        let path = path_for(config);
        let err = |source| CheckpointError::Write { path: path.display().to_string(), source };
        let mut text = serde_json::to_string_pretty(self).expect("a checkpoint serializes");
        text.push('\n');
        let tmp = path.with_file_name(format!(
            ".{}.tmp-{}",
            path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            std::process::id()
        ));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            err(e)
        })
    }
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// What to do with a request, given the checkpoint next to the config file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// No unfinished sequence: plan from the config file.
    Fresh,
    /// The same request is unfinished: go on with step `from` (0-based).
    Resume { from: usize },
    /// The same request already finished and the config file is its result.
    AlreadyDone { version: u64 },
    /// Another request is unfinished.
    Refuse(Unfinished),
    /// The same request is unfinished but the config file is neither the
    /// last done version nor the next one.
    FileMismatch { file_version: u64, expected: u64 },
}

/// An unfinished sequence, for the refusal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unfinished {
    pub command: String,
    pub done: usize,
    pub total: usize,
    pub done_version: u64,
    pub final_version: u64,
}

impl std::fmt::Display for Unfinished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` is unfinished ({}/{} steps done, version {} of {}); finish it first by running `chitin cluster {} --config …` again",
            self.command, self.done, self.total, self.done_version, self.final_version, self.command
        )
    }
}

/// Decides between a fresh start, a resume and a refusal (pure).
pub(crate) fn decide(existing: Option<&Checkpoint>, requested: &Sequence, file_version: u64) -> Decision {
    let Some(cp) = existing else { return Decision::Fresh };
    if cp.is_finished() {
        if &cp.sequence == requested && file_version == cp.final_version() && !cp.steps.is_empty() {
            return Decision::AlreadyDone { version: file_version };
        }
        return Decision::Fresh;
    }
    if &cp.sequence != requested {
        return Decision::Refuse(Unfinished {
            command: cp.command.clone(),
            done: cp.done,
            total: cp.steps.len(),
            done_version: cp.done_version(),
            final_version: cp.final_version(),
        });
    }
    // The config file is written before the checkpoint: after a crash in
    // between it may already hold the next step's version.
    let done = cp.done_version();
    let next = cp.steps[cp.done].version;
    if file_version != done && file_version != next {
        return Decision::FileMismatch { file_version, expected: done };
    }
    Decision::Resume { from: cp.done }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::plan::{move_shard, split_shard};
    use crate::topology::testutil::base;

    fn mv() -> Sequence {
        Sequence::MoveShard { shard_id: "A_00_3f".into(), from_node: "n1".into(), to_node: "n4".into() }
    }

    fn cp(done: usize) -> Checkpoint {
        let p = move_shard(&base(), "A_00_3f", "n1", "n4").unwrap();
        let mut c = Checkpoint::new(mv(), &p);
        c.done = done;
        c
    }

    #[test]
    fn decide_table() {
        let split = Sequence::SplitShard { shard_id: "A_00_3f".into(), split_at: None, children: 2 };
        let cases: Vec<(&str, Option<Checkpoint>, Sequence, u64, Decision)> = vec![
            ("none", None, mv(), 1, Decision::Fresh),
            ("resume at 0", Some(cp(0)), mv(), 1, Decision::Resume { from: 0 }),
            ("resume at 1", Some(cp(1)), mv(), 2, Decision::Resume { from: 1 }),
            ("file one ahead", Some(cp(1)), mv(), 3, Decision::Resume { from: 1 }),
            ("file behind", Some(cp(1)), mv(), 1, Decision::FileMismatch { file_version: 1, expected: 2 }),
            ("file far ahead", Some(cp(0)), mv(), 3, Decision::FileMismatch { file_version: 3, expected: 1 }),
            (
                "another unfinished",
                Some(cp(1)),
                split.clone(),
                2,
                Decision::Refuse(Unfinished {
                    command: "move-shard --shard-id A_00_3f --from-node n1 --to-node n4".into(),
                    done: 1,
                    total: 2,
                    done_version: 2,
                    final_version: 3,
                }),
            ),
            ("finished, same", Some(cp(2)), mv(), 3, Decision::AlreadyDone { version: 3 }),
            ("finished, other", Some(cp(2)), split, 3, Decision::Fresh),
            ("finished, file moved on", Some(cp(2)), mv(), 5, Decision::Fresh),
        ];
        for (name, existing, req, file, want) in cases {
            assert_eq!(decide(existing.as_ref(), &req, file), want, "{name}");
        }
        let Decision::Refuse(u) = decide(Some(&cp(0)), &Sequence::Rebalance, 1) else { panic!() };
        assert!(u.to_string().contains("finish it first by running `chitin cluster move-shard --shard-id A_00_3f"), "{u}");
    }

    #[test]
    fn file_round_trip() {
        let dir = std::env::temp_dir().join(format!("chitin-rollout-cp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("cluster_config.json");
        assert_eq!(path_for(&config), dir.join("cluster_config.json.rollout.json"));
        assert_eq!(Checkpoint::load(&config).unwrap(), None);
        let p = split_shard(&base(), "A_00_3f", &[0x2000_0000]).unwrap();
        let mut c = Checkpoint::new(
            Sequence::SplitShard { shard_id: "A_00_3f".into(), split_at: Some("20000000".into()), children: 2 },
            &p,
        );
        c.done = 1;
        c.save(&config).unwrap();
        let back = Checkpoint::load(&config).unwrap().unwrap();
        assert_eq!(back, c);
        assert_eq!(back.plan().unwrap(), p);
        assert_eq!((back.done_version(), back.final_version(), back.is_finished()), (2, 3, false));
        std::fs::write(path_for(&config), "{").unwrap();
        assert!(matches!(Checkpoint::load(&config), Err(CheckpointError::Malformed { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
