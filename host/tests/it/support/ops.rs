//! What the operator-facing tests share: a parser of the Prometheus text
//! exposition that `/metrics` answers, strict enough to fail on a line it
//! does not understand.

use std::collections::{BTreeMap, HashMap};

/// One sample line: name, labels and value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed exposition: each family's type and help, and every sample.
#[derive(Debug, Default)]
pub struct Exposition {
    pub types: HashMap<String, String>,
    pub helps: HashMap<String, String>,
    pub samples: Vec<Sample>,
}

impl Exposition {
    /// Parses the text format (version 0.0.4); an unparsable line is an error
    /// naming it, and so is a sample of no declared family.
    pub fn parse(text: &str) -> Result<Exposition, String> {
        let mut e = Exposition::default();
        for (n, line) in text.lines().enumerate() {
            let bad = |why: &str| format!("line {}: {why}: {line:?}", n + 1);
            if line.trim().is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').ok_or_else(|| bad("TYPE without a type"))?;
                if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                    return Err(bad("unknown type"));
                }
                if e.types.insert(name.to_string(), kind.to_string()).is_some() {
                    return Err(bad("family declared twice"));
                }
                continue;
            }
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
                if help.ends_with("..") {
                    return Err(bad("help ends in two periods (the encoder adds one; the text must not)"));
                }
                e.helps.insert(name.to_string(), help.to_string());
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let sample = parse_sample(line).ok_or_else(|| bad("not a sample"))?;
            if e.family_of(&sample.name).is_none() {
                return Err(bad("sample of no declared family"));
            }
            e.samples.push(sample);
        }
        Ok(e)
    }

    /// The declared family a sample name belongs to (`x_bucket` → `x` for a
    /// histogram).
    pub fn family_of(&self, sample: &str) -> Option<&str> {
        if let Some((name, _)) = self.types.get_key_value(sample) {
            return Some(name);
        }
        for suffix in ["_bucket", "_sum", "_count", "_total"] {
            if let Some(base) = sample.strip_suffix(suffix)
                && let Some((name, _)) = self.types.get_key_value(base)
            {
                return Some(name);
            }
        }
        None
    }

    /// Samples named `name` whose labels include every pair of `labels`.
    pub fn matching<'a>(&'a self, name: &'a str, labels: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples
            .iter()
            .filter(move |s| s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
    }

    /// The sum of the samples `matching` selects (0 when none).
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels).map(|s| s.value).sum()
    }

    /// The one sample `name` with no labels.
    pub fn value(&self, name: &str) -> Option<f64> {
        self.samples.iter().find(|s| s.name == name && s.labels.is_empty()).map(|s| s.value)
    }

    /// Every name a query may use: each family and, for histograms, its
    /// `_bucket`, `_sum` and `_count` series; `_total` for counters.
    pub fn queryable_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        for (name, kind) in &self.types {
            names.push(name.clone());
            match kind.as_str() {
                "histogram" => names.extend(["_bucket", "_sum", "_count"].map(|s| format!("{name}{s}"))),
                "counter" if !name.ends_with("_total") => names.push(format!("{name}_total")),
                _ => {}
            }
        }
        names.sort();
        names
    }
}

fn parse_sample(line: &str) -> Option<Sample> {
    let (name, rest) = match line.find(['{', ' ']) {
        Some(i) => line.split_at(i),
        None => return None,
    };
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
        return None;
    }
    let mut labels = BTreeMap::new();
    let rest = if let Some(body) = rest.strip_prefix('{') {
        let mut chars = body.char_indices();
        let mut key = String::new();
        loop {
            let (_, c) = chars.next()?;
            match c {
                '}' => break,
                ',' => continue,
                '=' => {
                    if chars.next()?.1 != '"' {
                        return None;
                    }
                    let mut value = String::new();
                    loop {
                        match chars.next()?.1 {
                            '\\' => value.push(chars.next()?.1),
                            '"' => break,
                            c => value.push(c),
                        }
                    }
                    labels.insert(std::mem::take(&mut key), value);
                }
                c => key.push(c),
            }
        }
        let used = body.len() - chars.as_str().len();
        &body[used..]
    } else {
        rest
    };
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample { name: name.to_string(), labels, value })
}

/// Checks a histogram family's samples are whole: for every label set the
/// buckets never decrease, the `+Inf` bucket equals `_count`, and `_sum`
/// is there. Returns the total count.
pub fn check_histogram(e: &Exposition, family: &str) -> Result<f64, String> {
    if e.types.get(family).map(String::as_str) != Some("histogram") {
        return Err(format!("{family} is not declared a histogram"));
    }
    let bucket = format!("{family}_bucket");
    let mut by_set: BTreeMap<Vec<(String, String)>, Vec<(f64, f64)>> = BTreeMap::new();
    for s in e.samples.iter().filter(|s| s.name == bucket) {
        let le: f64 = match s.labels.get("le").map(String::as_str) {
            Some("+Inf") => f64::INFINITY,
            Some(v) => v.parse().map_err(|_| format!("{family}: bad le {v}"))?,
            None => return Err(format!("{family}: a bucket without le")),
        };
        let set: Vec<(String, String)> =
            s.labels.iter().filter(|(k, _)| *k != "le").map(|(k, v)| (k.clone(), v.clone())).collect();
        by_set.entry(set).or_default().push((le, s.value));
    }
    let mut total = 0.0;
    for (set, mut buckets) in by_set {
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        if buckets.windows(2).any(|w| w[1].1 < w[0].1) {
            return Err(format!("{family}{set:?}: buckets decrease: {buckets:?}"));
        }
        let inf = buckets.last().filter(|b| b.0.is_infinite()).ok_or_else(|| format!("{family}{set:?}: no +Inf bucket"))?.1;
        let pairs: Vec<(&str, &str)> = set.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let count = e.matching(&format!("{family}_count"), &pairs).find(|s| s.labels.len() == set.len()).map(|s| s.value);
        if count != Some(inf) {
            return Err(format!("{family}{set:?}: _count {count:?} but the +Inf bucket is {inf}"));
        }
        if e.matching(&format!("{family}_sum"), &pairs).next().is_none() {
            return Err(format!("{family}{set:?}: no _sum"));
        }
        total += inf;
    }
    Ok(total)
}

#[test]
fn the_parser_reads_what_it_must_and_refuses_the_rest() {
    let text = "# HELP a_total A.\n# TYPE a_total counter\na_total 3\n# TYPE h histogram\n\
                h_bucket{le=\"0.5\",outcome=\"ok\"} 1\nh_bucket{le=\"+Inf\",outcome=\"ok\"} 2\n\
                h_sum{outcome=\"ok\"} 0.75\nh_count{outcome=\"ok\"} 2\n# TYPE g gauge\ng{x=\"a \\\"q\\\"\"} -1\n";
    let e = Exposition::parse(text).unwrap();
    assert_eq!(e.value("a_total"), Some(3.0));
    assert_eq!(e.sum("h_count", &[("outcome", "ok")]), 2.0);
    assert_eq!(e.matching("g", &[("x", "a \"q\"")]).next().unwrap().value, -1.0);
    assert_eq!(check_histogram(&e, "h"), Ok(2.0));
    assert!(Exposition::parse("orphan 1\n").unwrap_err().contains("no declared family"));
    assert!(Exposition::parse("# TYPE x gauge\nx{a=\"b\" 1\n").is_err());
    assert!(Exposition::parse("# HELP a_total A..\n").unwrap_err().contains("two periods"));
    let broken = text.replace("h_count{outcome=\"ok\"} 2", "h_count{outcome=\"ok\"} 3");
    assert!(check_histogram(&Exposition::parse(&broken).unwrap(), "h").unwrap_err().contains("_count"));
}
