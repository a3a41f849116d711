//! Deployment state: `{ns}:deployments:{uuid}` is one JSON document written
//! with `SET … EX` (3600 s while active, 86400 s once terminal), plus the
//! `{ns}:deployments:active` and `{ns}:deployments:by-instance:{id}` sets.
//!
//! State machine (pure, [`transition`]):
//!
//! ```text
//! pending ──► running ──► succeeded
//!    │           ├──────► failed
//!    │           └──────► cancelled
//!    ├──────────────────► failed
//!    └──────────────────► cancelled
//! ```
//!
//! A non-terminal state may be "updated" to itself (message or progress
//! change). Terminal states (`succeeded`, `failed`, `cancelled`) are final.
//! `owner_instance_id` is set at start and never changes: there is no
//! takeover. Updates are compare-and-set on the whole stored document (a
//! Lua script), so an update racing the health monitor's "orphaned" marking
//! never resurrects a failed deployment.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::conn::RedisConn;
use super::keys::{InvalidInstanceId, Keys, validate_instance_id};
use super::time::unix_now;

/// TTL of an active deployment's document.
pub(crate) const ACTIVE_TTL_SECS: u64 = 3600;
/// TTL of a terminal deployment's document.
pub(crate) const TERMINAL_TTL_SECS: u64 = 86400;

/// Where a deployment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeploymentState {
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl DeploymentState {
    pub const ALL: [DeploymentState; 5] = [
        DeploymentState::Pending,
        DeploymentState::Running,
        DeploymentState::Succeeded,
        DeploymentState::Failed,
        DeploymentState::Cancelled,
    ];

    pub fn is_terminal(self) -> bool {
        matches!(self, DeploymentState::Succeeded | DeploymentState::Failed | DeploymentState::Cancelled)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DeploymentState::Pending => "pending",
            DeploymentState::Running => "running",
            DeploymentState::Succeeded => "succeeded",
            DeploymentState::Failed => "failed",
            DeploymentState::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for DeploymentState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for DeploymentState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DeploymentState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| format!("unknown deployment state {s:?} (pending, running, succeeded, failed, cancelled)"))
    }
}

/// Why a state change is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error("{from} is a terminal state; terminal states are final")]
    Terminal { from: DeploymentState },
    #[error("a deployment cannot go from {from} to {to}")]
    Invalid { from: DeploymentState, to: DeploymentState },
}

/// The state machine: may a deployment in `from` move to `to`?
pub(crate) fn transition(from: DeploymentState, to: DeploymentState) -> Result<(), TransitionError> {
    use DeploymentState::*;
    if from.is_terminal() {
        return Err(TransitionError::Terminal { from });
    }
    match (from, to) {
        (Pending, Pending | Running | Failed | Cancelled) => Ok(()),
        (Running, Running | Succeeded | Failed | Cancelled) => Ok(()),
        _ => Err(TransitionError::Invalid { from, to }),
    }
}

/// Steps done out of steps planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub completed: u64,
    pub total: u64,
}

/// The JSON document at `{ns}:deployments:{uuid}`.
///
/// Kept free of arrays so the health monitor's Lua script (cjson) can
/// rewrite it without turning an empty array into an object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deployment {
    pub deployment_id: String,
    pub owner_instance_id: String,
    pub state: DeploymentState,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub progress: Option<Progress>,
    pub created_at: u64,
    pub updated_at: u64,
    #[serde(default)]
    pub finished_at: Option<u64>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

/// What [`Deployments::start`] needs.
#[derive(Debug, Clone, Default)]
pub struct NewDeployment {
    /// The deployment's id (a new UUIDv7 when `None`).
    pub deployment_id: Option<Uuid>,
    pub description: String,
    /// `pending` or `running` (default `running`).
    pub state: Option<DeploymentState>,
    pub message: Option<String>,
    pub progress: Option<Progress>,
    pub metadata: BTreeMap<String, String>,
}

/// A change to a deployment; `None` fields stay as they are, metadata is merged.
#[derive(Debug, Clone, Default)]
pub struct DeploymentUpdate {
    pub state: Option<DeploymentState>,
    pub message: Option<String>,
    pub progress: Option<Progress>,
    pub metadata: BTreeMap<String, String>,
}

/// Applies `update` to `current` at time `now` (pure).
pub(crate) fn apply_update(current: &Deployment, update: &DeploymentUpdate, now: u64) -> Result<Deployment, TransitionError> {
    let to = update.state.unwrap_or(current.state);
    transition(current.state, to)?;
    let mut next = current.clone();
    next.state = to;
    if let Some(m) = &update.message {
        next.message = Some(m.clone());
    }
    if let Some(p) = update.progress {
        next.progress = Some(p);
    }
    next.metadata.extend(update.metadata.iter().map(|(k, v)| (k.clone(), v.clone())));
    next.updated_at = now;
    if to.is_terminal() {
        next.finished_at = Some(now);
    }
    Ok(next)
}

/// Which deployments [`Deployments::list`] returns.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only non-terminal ones (members of `{ns}:deployments:active`).
    pub active_only: bool,
    /// Only those owned by this instance.
    pub instance: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum DeploymentError {
    #[error("deployment {id} not found (never started, or its record expired)")]
    NotFound { id: String },
    #[error("deployment {id} is already {state}; terminal states are final, so it cannot be updated")]
    Terminal { id: String, state: DeploymentState },
    #[error("deployment {id} cannot go from {from} to {to}")]
    InvalidTransition { id: String, from: DeploymentState, to: DeploymentState },
    #[error("deployment {id} cannot start in state {state}: a deployment starts pending or running")]
    InvalidStartState { id: String, state: DeploymentState },
    #[error("finish needs a terminal state (succeeded, failed or cancelled), not {state}")]
    NotTerminal { state: DeploymentState },
    #[error("deployment {id} already exists")]
    AlreadyExists { id: String },
    #[error("deployment {id} kept changing under this update; gave up after {attempts} attempts")]
    Conflict { id: String, attempts: u32 },
    #[error("invalid deployment id {id:?}: not a UUID")]
    InvalidId { id: String },
    #[error(transparent)]
    InstanceId(#[from] InvalidInstanceId),
    #[error("deployment {id}: stored document is not valid JSON: {source}")]
    Json { id: String, source: serde_json::Error },
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
}

/// `SET NX EX` the document and add it to both sets.
const START: &str = r#"
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then
  return 0
end
redis.call('SADD', KEYS[2], ARGV[3])
redis.call('SADD', KEYS[3], ARGV[3])
return 1
"#;

/// Compare-and-set on the whole document. -1 missing, 0 changed meanwhile, 1 written.
const UPDATE: &str = r#"
local cur = redis.call('GET', KEYS[1])
if not cur then return -1 end
if cur ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
if ARGV[4] == '1' then redis.call('SREM', KEYS[2], ARGV[5]) end
return 1
"#;

const MAX_CAS_ATTEMPTS: u32 = 16;

/// Parses and normalises a deployment id (a UUID).
pub(crate) fn parse_deployment_id(id: &str) -> Result<String, DeploymentError> {
    Uuid::parse_str(id).map(|u| u.hyphenated().to_string()).map_err(|_| DeploymentError::InvalidId { id: id.to_string() })
}

/// Deployment records, written as one instance.
#[derive(Clone)]
pub struct Deployments {
    conn: RedisConn,
    keys: Keys,
    instance_id: Arc<str>,
    start_script: Arc<redis::Script>,
    update_script: Arc<redis::Script>,
}

impl Deployments {
    pub fn new(conn: RedisConn, keys: Keys, instance_id: &str) -> Result<Self, InvalidInstanceId> {
        validate_instance_id(instance_id)?;
        Ok(Deployments {
            conn,
            keys,
            instance_id: instance_id.into(),
            start_script: Arc::new(redis::Script::new(START)),
            update_script: Arc::new(redis::Script::new(UPDATE)),
        })
    }

    /// Records a new deployment owned by this instance.
    pub async fn start(&self, new: NewDeployment) -> Result<Deployment, DeploymentError> {
        let id = new.deployment_id.unwrap_or_else(Uuid::now_v7).hyphenated().to_string();
        let state = new.state.unwrap_or(DeploymentState::Running);
        if state.is_terminal() {
            return Err(DeploymentError::InvalidStartState { id, state });
        }
        let now = unix_now();
        let d = Deployment {
            deployment_id: id.clone(),
            owner_instance_id: self.instance_id.to_string(),
            state,
            description: new.description,
            message: new.message,
            progress: new.progress,
            created_at: now,
            updated_at: now,
            finished_at: None,
            metadata: new.metadata,
        };
        let json = serde_json::to_string(&d).map_err(|source| DeploymentError::Json { id: id.clone(), source })?;
        let mut c = self.conn.get().await?;
        let ok: i64 = self
            .start_script
            .key(self.keys.deployment(&id))
            .key(self.keys.deployments_active())
            .key(self.keys.deployments_by_instance(&self.instance_id))
            .arg(json)
            .arg(ACTIVE_TTL_SECS)
            .arg(&id)
            .invoke_async(&mut c)
            .await?;
        if ok == 0 {
            return Err(DeploymentError::AlreadyExists { id });
        }
        Ok(d)
    }

    /// Changes state, message, progress or metadata. Refuses terminal
    /// deployments and invalid transitions; keeps the owner.
    pub async fn update(&self, id: &str, update: DeploymentUpdate) -> Result<Deployment, DeploymentError> {
        let id = parse_deployment_id(id)?;
        let key = self.keys.deployment(&id);
        let mut c = self.conn.get().await?;
        for _ in 0..MAX_CAS_ATTEMPTS {
            let raw: Option<String> = c.get(&key).await?;
            let Some(raw) = raw else {
                return Err(DeploymentError::NotFound { id });
            };
            let current: Deployment =
                serde_json::from_str(&raw).map_err(|source| DeploymentError::Json { id: id.clone(), source })?;
            let next = apply_update(&current, &update, unix_now()).map_err(|e| match e {
                TransitionError::Terminal { from } => DeploymentError::Terminal { id: id.clone(), state: from },
                TransitionError::Invalid { from, to } => DeploymentError::InvalidTransition { id: id.clone(), from, to },
            })?;
            let terminal = next.state.is_terminal();
            let json = serde_json::to_string(&next).map_err(|source| DeploymentError::Json { id: id.clone(), source })?;
            let r: i64 = self
                .update_script
                .key(&key)
                .key(self.keys.deployments_active())
                .arg(&raw)
                .arg(json)
                .arg(if terminal { TERMINAL_TTL_SECS } else { ACTIVE_TTL_SECS })
                .arg(if terminal { "1" } else { "0" })
                .arg(&id)
                .invoke_async(&mut c)
                .await?;
            match r {
                1 => return Ok(next),
                -1 => return Err(DeploymentError::NotFound { id }),
                _ => continue,
            }
        }
        Err(DeploymentError::Conflict { id, attempts: MAX_CAS_ATTEMPTS })
    }

    /// Moves a deployment to a terminal state (TTL becomes 86400 s and it
    /// leaves the active set).
    pub async fn finish(&self, id: &str, state: DeploymentState, message: Option<String>) -> Result<Deployment, DeploymentError> {
        if !state.is_terminal() {
            return Err(DeploymentError::NotTerminal { state });
        }
        self.update(id, DeploymentUpdate { state: Some(state), message, ..Default::default() }).await
    }

    /// One deployment, if its record exists.
    pub async fn show(&self, id: &str) -> Result<Option<Deployment>, DeploymentError> {
        show(&self.conn, &self.keys, id).await
    }

    /// Deployments matching `filter`, oldest first, and the records that
    /// could not be read.
    pub async fn list(&self, filter: &ListFilter) -> Result<Listing, DeploymentError> {
        list(&self.conn, &self.keys, filter).await
    }

    /// `SCARD {ns}:deployments:active`.
    pub async fn active_count(&self) -> Result<u64, DeploymentError> {
        let mut c = self.conn.get().await?;
        Ok(c.scard(self.keys.deployments_active()).await?)
    }
}

/// One deployment, if its record exists.
pub(crate) async fn show(conn: &RedisConn, keys: &Keys, id: &str) -> Result<Option<Deployment>, DeploymentError> {
    let id = parse_deployment_id(id)?;
    let mut c = conn.get().await?;
    let raw: Option<String> = c.get(keys.deployment(&id)).await?;
    raw.map(|r| serde_json::from_str(&r).map_err(|source| DeploymentError::Json { id, source })).transpose()
}

/// What a listing found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Listing {
    /// The deployments matching the filter, oldest first.
    pub deployments: Vec<Deployment>,
    /// Records that are not a deployment document (written by hand, by a
    /// peer of another version, or damaged): skipped, so that one bad
    /// record does not hide every good one, and named here so the caller
    /// can report them.
    pub unreadable: Vec<Unreadable>,
}

/// A deployment record a listing skipped.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unreadable {
    pub deployment_id: String,
    /// Why it could not be read.
    pub error: String,
}

/// Deployments matching `filter`, oldest first. Set members whose record
/// has expired are dropped from the sets on the way; records that do not
/// parse are skipped and listed in [`Listing::unreadable`].
pub(crate) async fn list(conn: &RedisConn, keys: &Keys, filter: &ListFilter) -> Result<Listing, DeploymentError> {
    let mut c = conn.get().await?;
    let ids: Vec<String> = match (&filter.instance, filter.active_only) {
        (Some(inst), active_only) => {
            validate_instance_id(inst)?;
            if active_only {
                c.sinter(&[keys.deployments_by_instance(inst), keys.deployments_active()]).await?
            } else {
                c.smembers(keys.deployments_by_instance(inst)).await?
            }
        }
        (None, true) => c.smembers(keys.deployments_active()).await?,
        (None, false) => {
            let prefix = keys.deployment_prefix();
            let found = c.scan_prefix(&prefix).await?;
            let mut ids: Vec<String> =
                found.iter().map(|k| &k[prefix.len()..]).filter(|s| Uuid::parse_str(s).is_ok()).map(str::to_string).collect();
            ids.sort();
            ids.dedup();
            ids
        }
    };
    let mut out = Vec::with_capacity(ids.len());
    let mut unreadable = Vec::new();
    let mut missing = Vec::new();
    for chunk in ids.chunks(1000) {
        let doc_keys: Vec<String> = chunk.iter().map(|id| keys.deployment(id)).collect();
        let raws: Vec<Option<String>> = redis::cmd("MGET").arg(&doc_keys).query_async(&mut c).await?;
        for (id, raw) in chunk.iter().zip(raws) {
            match raw.map(|r| serde_json::from_str::<Deployment>(&r)) {
                Some(Ok(d)) => out.push(d),
                Some(Err(e)) => unreadable.push(Unreadable { deployment_id: id.clone(), error: e.to_string() }),
                None => missing.push(id.clone()),
            }
        }
    }
    if !missing.is_empty() {
        let mut p = redis::pipe();
        p.srem(keys.deployments_active(), &missing).ignore();
        if let Some(inst) = &filter.instance {
            p.srem(keys.deployments_by_instance(inst), &missing).ignore();
        }
        let _: () = p.query_async(&mut c).await?;
    }
    if filter.active_only {
        out.retain(|d| !d.state.is_terminal());
    }
    out.sort_by(|a, b| (a.created_at, &a.deployment_id).cmp(&(b.created_at, &b.deployment_id)));
    Ok(Listing { deployments: out, unreadable })
}

#[cfg(test)]
mod tests {
    use super::DeploymentState::*;
    use super::*;

    #[test]
    fn transition_table() {
        // (from, to, allowed)
        let table = [
            (Pending, Pending, true),
            (Pending, Running, true),
            (Pending, Succeeded, false),
            (Pending, Failed, true),
            (Pending, Cancelled, true),
            (Running, Pending, false),
            (Running, Running, true),
            (Running, Succeeded, true),
            (Running, Failed, true),
            (Running, Cancelled, true),
        ];
        for (from, to, ok) in table {
            assert_eq!(transition(from, to).is_ok(), ok, "{from} -> {to}");
            if !ok {
                assert_eq!(transition(from, to), Err(TransitionError::Invalid { from, to }));
            }
        }
        for from in [Succeeded, Failed, Cancelled] {
            for to in DeploymentState::ALL {
                assert_eq!(transition(from, to), Err(TransitionError::Terminal { from }), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn terminal_states() {
        let terminal: Vec<_> = DeploymentState::ALL.into_iter().filter(|s| s.is_terminal()).collect();
        assert_eq!(terminal, [Succeeded, Failed, Cancelled]);
        // The health monitor's Lua script hardcodes the same list.
        for s in DeploymentState::ALL {
            let in_script = super::super::monitor::SWEEP_ONE.contains(&format!("{}=true", s.as_str()));
            assert_eq!(in_script, s.is_terminal(), "{s}");
        }
    }

    #[test]
    fn states_round_trip_as_text() {
        for s in DeploymentState::ALL {
            assert_eq!(s.as_str().parse::<DeploymentState>(), Ok(s));
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{s}\""));
        }
        assert!("done".parse::<DeploymentState>().is_err());
    }

    fn doc(state: DeploymentState) -> Deployment {
        Deployment {
            deployment_id: "019b9450-0b91-8c10-86c3-5c2c3f6b9f04".into(),
            owner_instance_id: "owner".into(),
            state,
            description: "d".into(),
            message: None,
            progress: None,
            created_at: 10,
            updated_at: 10,
            finished_at: None,
            metadata: BTreeMap::from([("a".into(), "1".into())]),
        }
    }

    #[test]
    fn apply_update_keeps_owner_and_merges() {
        let u = DeploymentUpdate {
            state: Some(Succeeded),
            message: Some("done".into()),
            progress: Some(Progress { completed: 3, total: 3 }),
            metadata: BTreeMap::from([("b".into(), "2".into())]),
        };
        let next = apply_update(&doc(Running), &u, 20).unwrap();
        assert_eq!(next.owner_instance_id, "owner");
        assert_eq!(next.state, Succeeded);
        assert_eq!(next.finished_at, Some(20));
        assert_eq!(next.updated_at, 20);
        assert_eq!(next.created_at, 10);
        assert_eq!(next.metadata.len(), 2);
        let keep = apply_update(&doc(Running), &DeploymentUpdate::default(), 30).unwrap();
        assert_eq!(keep.state, Running);
        assert_eq!(keep.finished_at, None);
        assert_eq!(apply_update(&doc(Failed), &DeploymentUpdate::default(), 30), Err(TransitionError::Terminal { from: Failed }));
    }

    #[test]
    fn ids_are_uuids() {
        assert!(parse_deployment_id("active").is_err());
        assert_eq!(parse_deployment_id("019B9450-0B91-8C10-86C3-5C2C3F6B9F04").unwrap(), "019b9450-0b91-8c10-86c3-5c2c3f6b9f04");
    }
}
