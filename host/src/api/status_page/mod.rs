//! The status page at `/` on the HTTP listener: the nodes and their state,
//! a key-space strip per application showing who holds each shard at which
//! epoch, unowned and draining shards, and this node's policy components.
//!
//! One self-contained HTML document (inline CSS and script, no external
//! assets). It refreshes itself: every two seconds the script fetches the
//! page again and swaps its `<main>`; without scripts a `<noscript>` meta
//! refresh reloads it. [`view`] reads what the page shows; [`render`] is
//! pure.

use std::fmt::Write as _;

use crate::lease::NodeState;
use crate::node::{ClusterView, Node};
use crate::policy::Slot;
use crate::topology::ShardState;

/// How often the page fetches itself again.
pub const REFRESH_MS: u32 = 2000;

/// One registration as the page shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct PageNode {
    pub name: String,
    pub uuid: String,
    pub state: String,
    pub live: bool,
    pub address: String,
    pub last_seen_ms_ago: i64,
    pub shards_held: usize,
}

/// One leased shard of the served config as the page shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct PageShard {
    pub id: String,
    pub application: String,
    pub lower: u32,
    pub upper: u32,
    pub state: ShardState,
    /// The live holder's name, if any.
    pub holder: Option<String>,
    pub epoch: i64,
    pub expires_in_ms: Option<i64>,
    /// Its live holder is leaving.
    pub draining: bool,
}

/// Everything the page shows.
#[derive(Clone, Debug, PartialEq)]
pub struct PageView {
    pub node: String,
    pub state: String,
    pub mode: &'static str,
    pub version: &'static str,
    pub config_version: u64,
    pub nodes: Vec<PageNode>,
    pub shards: Vec<PageShard>,
    /// (slot, component, SHA-256) of this node.
    pub policies: Vec<(String, String, String)>,
    /// Why the cluster could not be read, when it could not.
    pub error: Option<String>,
    pub generated_at: String,
}

/// What the page shows of `node` now. A database that cannot be read
/// leaves the nodes and holders empty and says why.
pub async fn view(node: &Node) -> PageView {
    let topology = node.topology();
    let loaded = node.policies();
    let policies = Slot::ALL
        .iter()
        .map(|slot| {
            let p = loaded.slot(*slot).plugin();
            (slot.interface().to_string(), p.name().to_string(), p.sha256().to_string())
        })
        .collect();
    let (cluster, error) = match node.cluster_view().await {
        Ok(v) => (Some(v), None),
        Err(e) => (None, Some(format!("cannot read the cluster from the database: {e}"))),
    };
    let empty = ClusterView { registry: Vec::new(), rows: Vec::new(), now: chrono::Utc::now() };
    let cv = cluster.as_ref().unwrap_or(&empty);
    let live_rows = || cv.rows.iter().filter(|r| r.live);
    let mut nodes: Vec<PageNode> = cv
        .registry
        .iter()
        .filter(|r| r.live || r.state != NodeState::Down)
        .map(|r| PageNode {
            name: r.name.clone(),
            uuid: r.id.to_string(),
            state: r.state.to_string(),
            live: r.live,
            address: r.address.clone(),
            last_seen_ms_ago: (cv.now - r.last_seen).num_milliseconds().max(0),
            shards_held: live_rows().filter(|l| l.holder == Some(r.id)).count(),
        })
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let (by_shard, leaving) = (cv.live_rows(), cv.leaving());
    let shards = topology
        .map
        .shards()
        .iter()
        .map(|s| {
            let row = by_shard.get(s.id.as_str()).copied();
            PageShard {
                id: s.id.clone(),
                application: s.application.clone(),
                lower: s.lower,
                upper: s.upper,
                state: s.state,
                holder: row.and_then(|r| r.holder_name.clone()),
                epoch: row.map_or(0, |r| r.epoch),
                expires_in_ms: row.and_then(|r| r.expires_at).map(|at| (at - cv.now).num_milliseconds()),
                draining: row.and_then(|r| r.holder).is_some_and(|h| leaving.contains(&h)),
            }
        })
        .collect();
    PageView {
        node: node.name.clone(),
        state: node.lifecycle().as_str().to_string(),
        mode: if node.standalone { "standalone" } else { "cluster" },
        version: env!("CARGO_PKG_VERSION"),
        config_version: topology.config.version,
        nodes,
        shards,
        policies,
        error,
        generated_at: cv.now.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    }
}

/// The page of a process that has no node yet.
pub fn render_unprovisioned() -> String {
    page(
        "UNPROVISIONED",
        "<main id=\"status\"><p class=\"warn\">This node is UNPROVISIONED: give it its id and first config with \
         <code>chitin cluster bootstrap-node</code>.</p></main>",
    )
}

/// Escapes text for HTML content and attribute values.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A stable colour per node: its place among the nodes, around the hue circle.
fn colour(nodes: &[PageNode], holder: &str) -> String {
    let i = nodes.iter().position(|n| n.name == holder).unwrap_or(nodes.len());
    format!("hsl({}, 60%, 72%)", (i * 137 + 200) % 360)
}

/// The share of the 32-bit key space from `lower` to `upper`, in percent.
fn percent(lower: u32, upper: u32) -> (f64, f64) {
    let space = f64::from(u32::MAX) + 1.0;
    (f64::from(lower) / space * 100.0, (f64::from(upper) - f64::from(lower) + 1.0) / space * 100.0)
}

/// The whole page.
pub fn render(v: &PageView) -> String {
    let mut m = String::new();
    let _ = write!(
        m,
        "<main id=\"status\"><header><h1>chitin <span class=\"dim\">{}</span></h1><p>node <b data-self=\"{}\">{}</b> \
         is <b>{}</b> · {} mode · config version <b>{}</b> · {} shards · read {}</p></header>",
        esc(v.version),
        esc(&v.node),
        esc(&v.node),
        esc(&v.state),
        v.mode,
        v.config_version,
        v.shards.len(),
        esc(&v.generated_at),
    );
    if let Some(e) = &v.error {
        let _ = write!(m, "<p class=\"warn\" id=\"error\">{}</p>", esc(e));
    }
    let unowned: Vec<&PageShard> = v.shards.iter().filter(|s| s.holder.is_none()).collect();
    let draining: Vec<&PageShard> = v.shards.iter().filter(|s| s.draining).collect();
    let _ = write!(
        m,
        "<section class=\"summary\"><div class=\"{}\" id=\"unowned\" data-count=\"{}\"><b>{}</b> unowned{}</div>\
         <div class=\"{}\" id=\"draining\" data-count=\"{}\"><b>{}</b> draining{}</div></section>",
        if unowned.is_empty() { "ok" } else { "bad" },
        unowned.len(),
        unowned.len(),
        list(&unowned),
        if draining.is_empty() { "ok" } else { "busy" },
        draining.len(),
        draining.len(),
        list(&draining),
    );

    m.push_str("<h2>Nodes</h2><table id=\"nodes\"><tr><th>node</th><th>state</th><th>shards</th><th>last seen</th><th>address</th><th>registration</th></tr>");
    for n in &v.nodes {
        let _ = write!(
            m,
            "<tr data-node=\"{}\" data-state=\"{}\" data-live=\"{}\"><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td>\
             <td class=\"state-{}\">{}{}</td><td>{}</td><td>{} ms ago</td><td>{}</td><td class=\"dim\">{}</td></tr>",
            esc(&n.name),
            esc(&n.state),
            n.live,
            colour(&v.nodes, &n.name),
            esc(&n.name),
            esc(&n.state),
            esc(&n.state),
            if n.live { "" } else { " (not live)" },
            n.shards_held,
            n.last_seen_ms_ago,
            esc(&n.address),
            esc(&n.uuid),
        );
    }
    m.push_str("</table>");

    let mut apps: Vec<&str> = v.shards.iter().map(|s| s.application.as_str()).collect();
    apps.dedup();
    for app in apps {
        let shards: Vec<&PageShard> = v.shards.iter().filter(|s| s.application == app).collect();
        let _ = write!(m, "<h2>{} <span class=\"dim\">key space 00000000–ffffffff</span></h2>", esc(app));
        strip(&mut m, v, app, shards.iter().copied().filter(|s| s.state.is_routable()), "strip");
        let children: Vec<&PageShard> = shards.iter().copied().filter(|s| !s.state.is_routable()).collect();
        if !children.is_empty() {
            m.push_str("<p class=\"dim\">activating children of splitting shards:</p>");
            strip(&mut m, v, app, children.into_iter(), "strip children");
        }
    }

    m.push_str(
        "<h2>Shards</h2><table id=\"shards\"><tr><th>shard</th><th>range</th><th>state</th><th>holder</th><th>epoch</th>\
         <th>lease left</th></tr>",
    );
    for s in &v.shards {
        let _ = write!(
            m,
            "<tr data-shard=\"{}\" data-holder=\"{}\"><td>{}</td><td><code>{:08x}–{:08x}</code></td><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.id),
            esc(s.holder.as_deref().unwrap_or("")),
            esc(&s.id),
            s.lower,
            s.upper,
            s.state,
            if s.draining { " · draining" } else { "" },
            s.holder.as_deref().map_or_else(|| "<b class=\"bad-text\">unowned</b>".to_string(), esc),
            s.epoch,
            s.expires_in_ms.map_or_else(String::new, |ms| format!("{ms} ms")),
        );
    }
    m.push_str(
        "</table><h2>Policies of this node</h2><table id=\"policies\"><tr><th>slot</th><th>component</th><th>SHA-256</th></tr>",
    );
    for (slot, plugin, sha) in &v.policies {
        let _ = write!(
            m,
            "<tr data-slot=\"{}\"><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
            esc(slot),
            esc(slot),
            esc(plugin),
            esc(sha)
        );
    }
    m.push_str("</table></main>");
    page(&v.node, &m)
}

fn list(shards: &[&PageShard]) -> String {
    if shards.is_empty() {
        return String::new();
    }
    let ids: Vec<String> = shards.iter().map(|s| esc(&s.id)).collect();
    format!(": {}", ids.join(", "))
}

/// One key-space strip: each shard placed at its share of the key space.
fn strip<'a>(m: &mut String, v: &PageView, app: &str, shards: impl Iterator<Item = &'a PageShard>, class: &str) {
    let _ = write!(m, "<div class=\"{class}\" data-application=\"{}\">", esc(app));
    for s in shards {
        let (left, width) = percent(s.lower, s.upper);
        let (fill, label) = match &s.holder {
            Some(h) => (colour(&v.nodes, h), format!("{} e{}", esc(h), s.epoch)),
            None => ("repeating-linear-gradient(45deg,#f4b4b4 0 6px,#fff 6px 12px)".to_string(), "unowned".to_string()),
        };
        let _ = write!(
            m,
            "<div class=\"seg{}\" style=\"left:{left:.4}%;width:{width:.4}%;background:{fill}\" data-shard=\"{}\" \
             data-holder=\"{}\" data-epoch=\"{}\" title=\"{} [{:08x}–{:08x}] {}\"><span>{}</span></div>",
            if s.draining { " draining" } else { "" },
            esc(&s.id),
            esc(s.holder.as_deref().unwrap_or("")),
            s.epoch,
            esc(&s.id),
            s.lower,
            s.upper,
            label,
            label,
        );
    }
    m.push_str("</div>");
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}\
h1{font-size:1.4em;margin:0}h2{font-size:1.1em;margin:1.4em 0 .4em}.dim{color:#888;font-weight:normal}\
table{border-collapse:collapse;background:#fff}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}\
th{background:#f0f0f0}.summary{display:flex;gap:1em;margin-top:1em}.summary div{padding:.4em .8em;border-radius:4px}\
.ok{background:#e3f4e3}.bad{background:#f8d0d0}.busy{background:#fbe7c0}.bad-text{color:#b00}\
.warn{background:#fbe7c0;padding:.5em}.state-leaving{color:#b60}.state-down{color:#b00}\
.strip{position:relative;height:46px;border:1px solid #bbb;background:#fff}.strip.children{height:30px}\
.seg{position:absolute;top:0;bottom:0;box-sizing:border-box;border-right:1px solid #fff;overflow:hidden;\
font-size:11px;white-space:nowrap;display:flex;align-items:center;justify-content:center}\
.seg.draining{outline:3px dashed #d80;outline-offset:-3px}\
.swatch{display:inline-block;width:.8em;height:.8em;margin-right:.4em;border-radius:2px}\
#refresh{position:fixed;top:.5em;right:1em;color:#888;font-size:12px}";

/// The refresh: fetch the page again, swap `<main>`, count successes on
/// `body[data-refreshes]` and show failures without losing the last view.
const SCRIPT: &str = "let refreshes=0;async function refresh(){const s=document.getElementById('refresh');\
try{const r=await fetch(location.href,{cache:'no-store',credentials:'same-origin'});if(!r.ok)throw new Error('HTTP '+r.status);\
const d=new DOMParser().parseFromString(await r.text(),'text/html');const fresh=d.getElementById('status');\
if(!fresh)throw new Error('no status in the answer');document.getElementById('status').replaceWith(fresh);\
refreshes++;document.body.dataset.refreshes=refreshes;s.textContent='live · refreshed '+new Date().toLocaleTimeString();s.style.color='';}\
catch(e){s.textContent='stale: '+e.message;s.style.color='#b00';}}";

fn page(title: &str, main: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>chitin · {}</title>\
         <link rel=\"icon\" href=\"data:,\"><meta name=\"viewport\" content=\"width=device-width\">\
         <noscript><meta http-equiv=\"refresh\" content=\"{}\"></noscript><style>{STYLE}</style></head>\
         <body data-refreshes=\"0\"><div id=\"refresh\">live</div>{main}<script>{SCRIPT}setInterval(refresh,{REFRESH_MS});</script></body></html>\n",
        esc(title),
        REFRESH_MS / 1000 + 1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PageView {
        let node = |name: &str, state: &str| PageNode {
            name: name.into(),
            uuid: format!("uuid-{name}"),
            state: state.into(),
            live: true,
            address: "127.0.0.1:1".into(),
            last_seen_ms_ago: 5,
            shards_held: 1,
        };
        let shard = |id: &str, lower: u32, upper: u32, holder: Option<&str>, draining: bool| PageShard {
            id: id.into(),
            application: "journal".into(),
            lower,
            upper,
            state: ShardState::Active,
            holder: holder.map(Into::into),
            epoch: 3,
            expires_in_ms: holder.map(|_| 1500),
            draining,
        };
        PageView {
            node: "n1".into(),
            state: "active".into(),
            mode: "cluster",
            version: "0.1.0",
            config_version: 7,
            nodes: vec![node("n1", "active"), node("n<2>", "leaving")],
            shards: vec![
                shard("j_00_7f", 0, 0x7fff_ffff, Some("n1"), false),
                shard("j_80_bf", 0x8000_0000, 0xbfff_ffff, Some("n<2>"), true),
                shard("j_c0_ff", 0xc000_0000, u32::MAX, None, false),
            ],
            policies: vec![("placement".into(), "default (embedded)".into(), "ab12".into())],
            error: None,
            generated_at: "now".into(),
        }
    }

    #[test]
    fn the_page_shows_nodes_holders_unowned_and_draining_shards_escaped() {
        let html = render(&sample());
        for want in [
            "data-node=\"n1\" data-state=\"active\"",
            "data-node=\"n&lt;2&gt;\" data-state=\"leaving\"",
            "data-shard=\"j_00_7f\" data-holder=\"n1\" data-epoch=\"3\"",
            "id=\"unowned\" data-count=\"1\"><b>1</b> unowned: j_c0_ff",
            "id=\"draining\" data-count=\"1\"><b>1</b> draining: j_80_bf",
            "class=\"seg draining\"",
            "config version <b>7</b>",
            "<code>ab12</code>",
            "setInterval(refresh,2000)",
        ] {
            assert!(html.contains(want), "{want} missing from\n{html}");
        }
        assert!(!html.contains("n<2>"), "unescaped text in\n{html}");
        assert!(!html.contains("http://") && !html.contains("https://"), "the page loads nothing from elsewhere");
    }

    #[test]
    fn strip_segments_cover_their_share_of_the_key_space() {
        assert_eq!(percent(0, u32::MAX), (0.0, 100.0));
        assert_eq!(percent(0x8000_0000, u32::MAX), (50.0, 50.0));
        let html = render(&sample());
        assert!(html.contains("left:0.0000%;width:50.0000%"), "{html}");
        assert!(html.contains("left:75.0000%;width:25.0000%"), "{html}");
    }
}
