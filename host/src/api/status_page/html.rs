//! The page's HTML: pure functions of a [`PageView`] and a [`PageQuery`].

use std::fmt::Write as _;

use super::strip::{self, Segment};
use super::{PAGE_SIZE, PageNode, PageQuery, PageShard, PageView, tally};
use crate::settings::types::percent_encode;
use crate::topology::ShardState;

/// How often the page fetches itself again.
pub const REFRESH_MS: u32 = 2000;
/// Shard ids the unowned and draining summaries name before linking to
/// the filtered table for the rest.
const NAMED: usize = 20;

/// The page of a process that has no node yet.
pub fn render_unprovisioned() -> String {
    page(
        "UNPROVISIONED",
        "<main id=\"status\"><p class=\"warn\">This node is UNPROVISIONED: give it its id and first config with \
         <code>chitin cluster bootstrap-node</code>.</p></main>",
    )
}

/// The whole page, its shard table as `query` selects it.
pub fn render(v: &PageView, query: &PageQuery) -> String {
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
    summary(&mut m, v);
    nodes(&mut m, v);
    cluster_panels(&mut m, v);
    let mut apps: Vec<&str> = v.shards.iter().map(|s| s.application.as_str()).collect();
    apps.dedup();
    for app in apps {
        let of_app = || v.shards.iter().filter(move |s| s.application == app);
        let _ = write!(m, "<h2>{} <span class=\"dim\">key space 00000000–ffffffff</span></h2>", esc(app));
        strip(&mut m, v, app, of_app().filter(|s| s.state.is_routable()).collect(), "strip");
        let children: Vec<&PageShard> = of_app().filter(|s| !s.state.is_routable()).collect();
        if !children.is_empty() {
            m.push_str("<p class=\"dim\">activating children of splitting shards:</p>");
            strip(&mut m, v, app, children, "strip children");
        }
    }
    shard_table(&mut m, v, query);
    m.push_str("<h2>Policies of this node</h2><table id=\"policies\"><tr><th>slot</th><th>component</th><th>SHA-256</th></tr>");
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

/// The unowned and draining counts, naming the first few of each.
fn summary(m: &mut String, v: &PageView) {
    m.push_str("<section class=\"summary\">");
    for (id, filter, class_when_any) in [("unowned", "unowned", "bad"), ("draining", "draining", "busy")] {
        let some: Vec<&PageShard> =
            v.shards.iter().filter(|s| if filter == "unowned" { s.holder.is_none() } else { s.draining }).collect();
        let mut named: Vec<String> = some.iter().take(NAMED).map(|s| esc(&s.id)).collect();
        if some.len() > NAMED {
            named.push(format!("<a href=\"?state={filter}\">and {} more</a>", some.len() - NAMED));
        }
        let _ = write!(
            m,
            "<div class=\"{}\" id=\"{id}\" data-count=\"{}\"><b>{}</b> {id}{}</div>",
            if some.is_empty() { "ok" } else { class_when_any },
            some.len(),
            some.len(),
            if named.is_empty() { String::new() } else { format!(": {}", named.join(", ")) },
        );
    }
    m.push_str("</section>");
}

fn nodes(m: &mut String, v: &PageView) {
    m.push_str(
        "<h2>Nodes</h2><table id=\"nodes\"><tr><th>node</th><th>state</th><th>shards</th><th>version</th>\
         <th>last seen</th><th>address</th><th>registration</th></tr>",
    );
    for n in &v.nodes {
        let _ = write!(
            m,
            "<tr data-node=\"{}\" data-state=\"{}\" data-live=\"{}\" data-version=\"{}\"><td><span class=\"swatch\" \
             style=\"background:{}\"></span>{}</td><td class=\"state-{}\">{}{}</td><td><a href=\"?holder={}\">{}</a></td>\
             <td>{}{}</td><td>{} ms ago</td><td>{}</td><td class=\"dim\">{}</td></tr>",
            esc(&n.name),
            esc(&n.state),
            n.live,
            esc(n.version.as_deref().unwrap_or("")),
            colour(&v.nodes, &n.name),
            esc(&n.name),
            esc(&n.state),
            esc(&n.state),
            if n.live { "" } else { " (not live)" },
            percent_encode(&n.name),
            n.shards_held,
            esc(n.version.as_deref().unwrap_or("unknown")),
            n.protocol.map_or_else(String::new, |p| format!(" <span class=\"dim\">protocol {p}</span>")),
            n.last_seen_ms_ago,
            esc(&n.address),
            esc(&n.uuid),
        );
    }
    m.push_str("</table>");
}

/// The upgrade, policy mismatches, shards in transition and this node's
/// busiest shards.
fn cluster_panels(m: &mut String, v: &PageView) {
    m.push_str("<section class=\"panels\">");
    m.push_str("<div id=\"upgrade\"><h3>Upgrade</h3>");
    match &v.upgrade {
        Some(u) => {
            let versions = tally(v.nodes.iter().filter(|n| n.live).map(|n| n.version.as_deref().unwrap_or("unknown")));
            let running: Vec<String> = versions.iter().map(|(ver, n)| format!("{} ×{n}", esc(ver))).collect();
            let _ = write!(
                m,
                "<p>cluster at <b data-cluster-version=\"{}\">{}</b>; live nodes run {}{}</p>",
                esc(&u.cluster_version),
                esc(&u.cluster_version),
                if running.is_empty() { "nothing".to_string() } else { running.join(", ") },
                if versions.len() > 1 { " <b class=\"busy-text\">(mixed: an upgrade is rolling)</b>" } else { "" },
            );
            if let Some(to) = &u.finalize_to {
                let _ = write!(
                    m,
                    "<p class=\"busy-text\" id=\"finalize\">not finalized: this binary could finalize to {} \
                     (<code>chitin cluster upgrade-status</code>)</p>",
                    esc(to)
                );
            }
        }
        None => m.push_str("<p class=\"dim\">unknown (the database could not be read)</p>"),
    }
    let _ = write!(m, "</div><div id=\"mismatches\" data-count=\"{}\"><h3>Policy mismatches</h3>", v.mismatches.len());
    if v.mismatches.is_empty() {
        m.push_str("<p class=\"dim\">none: this node's components are the cluster's</p>");
    }
    for mismatch in &v.mismatches {
        let _ = write!(m, "<p class=\"bad-text\">{}</p>", esc(mismatch));
    }
    m.push_str("</div><div id=\"transitions\"><h3>Shards in transition</h3>");
    let moving: Vec<(&str, usize)> = tally(v.shards.iter().filter(|s| s.state != ShardState::Active).map(|s| s.state.as_str()));
    if moving.is_empty() {
        m.push_str("<p class=\"dim\">none: no control sequence has a step under way</p>");
    }
    for (state, n) in moving {
        let _ = write!(m, "<p data-state=\"{state}\"><a href=\"?state={state}\">{n} {state}</a></p>");
    }
    m.push_str("</div><div id=\"busiest\"><h3>Busiest shards here</h3>");
    if v.busiest.is_empty() {
        m.push_str("<p class=\"dim\">no appends counted on this node</p>");
    }
    for l in &v.busiest {
        let _ = write!(
            m,
            "<p data-shard=\"{}\"><a href=\"?q={}\">{}</a> {:.1}/s · {:.0} B/s</p>",
            esc(&l.shard),
            percent_encode(&l.shard),
            esc(&l.shard),
            l.ops_per_sec,
            l.bytes_per_sec
        );
    }
    m.push_str("</div></section>");
}

/// One key-space strip: each box placed at its share of the key space.
fn strip(m: &mut String, v: &PageView, app: &str, shards: Vec<&PageShard>, class: &str) {
    let _ = write!(m, "<div class=\"{class}\" data-application=\"{}\">", esc(app));
    for segment in strip::segments(shards) {
        let (left, width) = percent(segment.lower, segment.upper);
        if let [s] = segment.shards[..] {
            let (fill, label) = match &s.holder {
                Some(h) => (colour(&v.nodes, h), format!("{} e{}", esc(h), s.epoch)),
                None => (UNOWNED_FILL.to_string(), "unowned".to_string()),
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
        } else {
            many(m, v, &segment, left, width);
        }
    }
    m.push_str("</div>");
}

/// A box of several shards: drawn as unowned if one of them is, else in
/// the colour of the holder of most; its title counts every holder.
fn many(m: &mut String, v: &PageView, segment: &Segment, left: f64, width: f64) {
    let (holders, unowned) = (segment.holders(), segment.unowned());
    let fill = match holders.first() {
        Some((h, _)) if unowned == 0 => colour(&v.nodes, h),
        _ => UNOWNED_FILL.to_string(),
    };
    let mut counts: Vec<String> = holders.iter().map(|(h, n)| format!("{} ×{n}", esc(h))).collect();
    if unowned > 0 {
        counts.push(format!("unowned ×{unowned}"));
    }
    let label = match holders[..] {
        [(h, n)] if unowned == 0 => format!("{} ×{n}", esc(h)),
        _ => format!("{} shards", segment.shards.len()),
    };
    let _ = write!(
        m,
        "<div class=\"seg many{}\" style=\"left:{left:.4}%;width:{width:.4}%;background:{fill}\" data-shards=\"{}\" \
         data-unowned=\"{unowned}\" title=\"{} shards [{:08x}–{:08x}]: {}\"><span>{label}</span></div>",
        if segment.draining() { " draining" } else { "" },
        segment.shards.len(),
        segment.shards.len(),
        segment.lower,
        segment.upper,
        counts.join(", "),
    );
}

/// The shard table: the filter form, one page of the selected shards,
/// and links to the pages before and after.
fn shard_table(m: &mut String, v: &PageView, query: &PageQuery) {
    let selected: Vec<&PageShard> = v.shards.iter().filter(|s| query.selects(s)).collect();
    let pages = selected.len().div_ceil(PAGE_SIZE).max(1);
    let page = query.page.unwrap_or(1).clamp(1, pages);
    let shown = &selected[((page - 1) * PAGE_SIZE).min(selected.len())..(page * PAGE_SIZE).min(selected.len())];
    m.push_str("<h2>Shards</h2>");
    filter_form(m, v, query);
    if let Some(problem) = query.problem() {
        let _ = write!(m, "<p class=\"warn\" id=\"query-problem\">{}</p>", esc(&problem));
    }
    let _ = write!(
        m,
        "<p id=\"shown\" data-selected=\"{}\" data-page=\"{page}\" data-pages=\"{pages}\">{} of {} shards{} · page {page} of {pages}",
        selected.len(),
        if shown.is_empty() {
            "none".to_string()
        } else {
            format!("{}–{}", (page - 1) * PAGE_SIZE + 1, (page - 1) * PAGE_SIZE + shown.len())
        },
        selected.len(),
        if query.filters() { format!(" selected (of {})", v.shards.len()) } else { String::new() },
    );
    if page > 1 {
        let _ = write!(m, " · <a rel=\"prev\" href=\"{}\">previous</a>", esc(&href(query, page - 1)));
    }
    if page < pages {
        let _ = write!(m, " · <a rel=\"next\" href=\"{}\">next</a>", esc(&href(query, page + 1)));
    }
    m.push_str(
        "</p><table id=\"shards\"><tr><th>shard</th><th>range</th><th>state</th><th>holder</th><th>epoch</th>\
         <th>lease left</th></tr>",
    );
    for s in shown {
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
    m.push_str("</table>");
}

/// The form that sets the query: application, holder and state from what
/// the page knows, and free text for the id.
fn filter_form(m: &mut String, v: &PageView, query: &PageQuery) {
    let mut apps: Vec<&str> = v.shards.iter().map(|s| s.application.as_str()).collect();
    apps.dedup();
    let holders: Vec<&str> = v.nodes.iter().map(|n| n.name.as_str()).collect();
    let states: Vec<&str> = ShardState::ALL.iter().map(|s| s.as_str()).chain(super::STATE_FILTERS).collect();
    m.push_str("<form id=\"filter\" method=\"get\">");
    for (name, label, options, chosen) in [
        ("app", "application", &apps, &query.app),
        ("holder", "holder", &holders, &query.holder),
        ("state", "state", &states, &query.state),
    ] {
        let _ = write!(m, "<label>{label} <select name=\"{name}\"><option value=\"\">any</option>");
        for o in options {
            let selected = if chosen.as_deref() == Some(*o) { " selected" } else { "" };
            let _ = write!(m, "<option{selected}>{}</option>", esc(o));
        }
        m.push_str("</select></label> ");
    }
    let _ = write!(
        m,
        "<label>id contains <input name=\"q\" value=\"{}\" size=\"16\"></label> <button>show</button> \
         <a href=\"?\">all</a></form>",
        esc(query.q.as_deref().unwrap_or(""))
    );
}

/// The page's address with `query`'s filters and page `page`.
fn href(query: &PageQuery, page: usize) -> String {
    let mut parts: Vec<String> = [("app", &query.app), ("holder", &query.holder), ("state", &query.state), ("q", &query.q)]
        .into_iter()
        .filter_map(|(k, v)| v.as_deref().filter(|v| !v.is_empty()).map(|v| format!("{k}={}", percent_encode(v))))
        .collect();
    parts.push(format!("page={page}"));
    format!("?{}", parts.join("&"))
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

const UNOWNED_FILL: &str = "repeating-linear-gradient(45deg,#f4b4b4 0 6px,#fff 6px 12px)";

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

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}\
h1{font-size:1.4em;margin:0}h2{font-size:1.1em;margin:1.4em 0 .4em}h3{font-size:1em;margin:0 0 .3em}.dim{color:#888;font-weight:normal}\
table{border-collapse:collapse;background:#fff}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}\
th{background:#f0f0f0}.summary{display:flex;gap:1em;margin-top:1em}.summary div{padding:.4em .8em;border-radius:4px}\
.panels{display:flex;flex-wrap:wrap;gap:1em;margin-top:1em}.panels>div{background:#fff;border:1px solid #ddd;padding:.5em .8em;min-width:14em}\
.panels p{margin:.2em 0}.ok{background:#e3f4e3}.bad{background:#f8d0d0}.busy{background:#fbe7c0}.bad-text{color:#b00}.busy-text{color:#b60}\
.warn{background:#fbe7c0;padding:.5em}.state-leaving{color:#b60}.state-down{color:#b00}\
.strip{position:relative;height:46px;border:1px solid #bbb;background:#fff}.strip.children{height:30px}\
.seg{position:absolute;top:0;bottom:0;box-sizing:border-box;border-right:1px solid #fff;overflow:hidden;\
font-size:11px;white-space:nowrap;display:flex;align-items:center;justify-content:center}\
.seg.draining{outline:3px dashed #d80;outline-offset:-3px}\
.swatch{display:inline-block;width:.8em;height:.8em;margin-right:.4em;border-radius:2px}\
#filter{margin:.4em 0}#refresh{position:fixed;top:.5em;right:1em;color:#888;font-size:12px}";

/// The refresh: fetch the page again, swap `<main>`, count successes on
/// `body[data-refreshes]` and show failures without losing the last view.
/// While a control of the filter form has the focus it waits, so that a
/// refresh never takes away what is being typed.
const SCRIPT: &str = "let refreshes=0;async function refresh(){const s=document.getElementById('refresh');\
const f=document.activeElement;if(f&&f.closest&&f.closest('form'))return;\
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
    use super::super::tests::shard;
    use super::super::{PageLoad, PageUpgrade};
    use super::*;

    fn node(name: &str, state: &str, version: &str) -> PageNode {
        PageNode {
            name: name.into(),
            uuid: format!("uuid-{name}"),
            state: state.into(),
            live: true,
            address: "127.0.0.1:1".into(),
            last_seen_ms_ago: 5,
            shards_held: 1,
            version: Some(version.into()),
            protocol: Some(3),
        }
    }

    fn sample() -> PageView {
        PageView {
            node: "n1".into(),
            state: "active".into(),
            mode: "cluster",
            version: "0.1.0",
            config_version: 7,
            nodes: vec![node("n1", "active", "0.5.0"), node("n<2>", "leaving", "0.4.0")],
            shards: vec![
                shard("j_00_7f", 0, 0x7fff_ffff, Some("n1"), false),
                shard("j_80_bf", 0x8000_0000, 0xbfff_ffff, Some("n<2>"), true),
                shard("j_c0_ff", 0xc000_0000, u32::MAX, None, false),
            ],
            policies: vec![("placement".into(), "default (embedded)".into(), "ab12".into())],
            mismatches: vec!["slot split: the cluster runs a.wasm, this node b.wasm".into()],
            upgrade: Some(PageUpgrade { cluster_version: "0.4.0".into(), finalize_to: Some("0.5.0".into()) }),
            busiest: vec![PageLoad { shard: "j_00_7f".into(), ops_per_sec: 12.5, bytes_per_sec: 300.0 }],
            error: None,
            generated_at: "now".into(),
        }
    }

    #[test]
    fn the_page_shows_nodes_holders_unowned_and_draining_shards_escaped() {
        let html = render(&sample(), &PageQuery::default());
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
    fn the_panels_show_versions_the_upgrade_mismatches_transitions_and_load() {
        let mut v = sample();
        v.shards[1].state = ShardState::Splitting;
        let html = render(&v, &PageQuery::default());
        for want in [
            "data-version=\"0.5.0\"",
            "protocol 3",
            "data-cluster-version=\"0.4.0\"",
            "live nodes run 0.5.0 ×1, 0.4.0 ×1 <b class=\"busy-text\">(mixed",
            "id=\"finalize\">not finalized: this binary could finalize to 0.5.0",
            "id=\"mismatches\" data-count=\"1\"",
            "slot split: the cluster runs a.wasm, this node b.wasm",
            "<p data-state=\"splitting\"><a href=\"?state=splitting\">1 splitting</a></p>",
            "<a href=\"?q=j_00_7f\">j_00_7f</a> 12.5/s · 300 B/s",
        ] {
            assert!(html.contains(want), "{want} missing from\n{html}");
        }
        let (mut calm, query) = (sample(), PageQuery::default());
        calm.mismatches.clear();
        calm.busiest.clear();
        calm.nodes[1].version = Some("0.5.0".into());
        calm.upgrade = Some(PageUpgrade { cluster_version: "0.5.0".into(), finalize_to: None });
        let html = render(&calm, &query);
        for want in ["none: this node's components", "none: no control sequence", "no appends counted", "0.5.0 ×2</p>"] {
            assert!(html.contains(want), "{want} missing from\n{html}");
        }
        assert!(!html.contains("id=\"finalize\"") && !html.contains("(mixed"), "{html}");
    }

    #[test]
    fn strip_boxes_cover_their_share_of_the_key_space() {
        assert_eq!(percent(0, u32::MAX), (0.0, 100.0));
        assert_eq!(percent(0x8000_0000, u32::MAX), (50.0, 50.0));
        let html = render(&sample(), &PageQuery::default());
        assert!(html.contains("left:0.0000%;width:50.0000%"), "{html}");
        assert!(html.contains("left:75.0000%;width:25.0000%"), "{html}");
    }

    /// `n` shards of one application, every 7th unowned, the rest on n1.
    fn many_shards(n: u32) -> PageView {
        let mut v = sample();
        let width = u32::MAX / n;
        v.shards = (0..n)
            .map(|i| {
                let upper = if i + 1 == n { u32::MAX } else { (i + 1) * width - 1 };
                shard(&format!("s{i:06}"), i * width, upper, (i % 7 != 0).then_some("n1"), false)
            })
            .collect();
        v
    }

    #[test]
    fn the_table_shows_one_page_of_the_selection_with_links_that_keep_the_filters() {
        let v = many_shards(1_000);
        let rows = |html: &str| html.matches("<tr data-shard=").count();
        let html = render(&v, &PageQuery::default());
        assert_eq!(rows(&html), PAGE_SIZE);
        assert!(
            html.contains("data-selected=\"1000\" data-page=\"1\" data-pages=\"10\">1–100 of 1000 shards · page 1 of 10"),
            "{html}"
        );
        assert!(html.contains("<a rel=\"next\" href=\"?page=2\">") && !html.contains("rel=\"prev\""));
        // The strip gathers them: fewer boxes than shards, the unowned counted.
        assert!(html.matches("class=\"seg").count() <= strip::MAX_SEGMENTS);
        assert!(html.contains("class=\"seg many\""), "{html}");
        // The summary names 20 and links to the rest.
        assert!(html.contains("<a href=\"?state=unowned\">and 123 more</a>"), "{html}");

        let unowned = PageQuery { state: Some("unowned".into()), q: Some("s0 &".into()), page: Some(2), ..Default::default() };
        let html = render(&v, &PageQuery { q: None, ..unowned.clone() });
        assert_eq!(rows(&html), 43, "143 unowned: 100 on page 1, 43 on page 2");
        assert!(html.contains("101–143 of 143 shards selected (of 1000) · page 2 of 2"), "{html}");
        assert!(html.contains("<a rel=\"prev\" href=\"?state=unowned&amp;page=1\">"), "{html}");
        assert!(html.contains("<option selected>unowned</option>"));
        assert_eq!(href(&unowned, 3), "?state=unowned&q=s0%20%26&page=3");
        // A page past the end shows the last; nothing selected shows none.
        let html = render(&v, &PageQuery { page: Some(99), ..Default::default() });
        assert!(html.contains("901–1000 of 1000 shards · page 10 of 10"), "{html}");
        let html = render(&v, &PageQuery { holder: Some("n9".into()), ..Default::default() });
        assert!(html.contains("none of 0 shards selected (of 1000) · page 1 of 1"), "{html}");
        assert_eq!(rows(&html), 0);
        let html = render(&v, &PageQuery { state: Some("owned".into()), ..Default::default() });
        assert!(html.contains("id=\"query-problem\">state=owned is no shard state"), "{html}");
    }

    #[test]
    fn a_page_of_100000_shards_stays_small() {
        let html = render(&many_shards(100_000), &PageQuery::default());
        assert!(html.len() < 200_000, "{} bytes", html.len());
        assert!(html.matches("class=\"seg").count() <= strip::MAX_SEGMENTS);
    }
}
