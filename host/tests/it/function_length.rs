//! No function under `host/src` runs over [`LIMIT`] lines (up to its
//! file's `#[cfg(test)]` block) unless a comment just above it says why
//! (`// Long: …`). A longer function is split into named steps.

use std::path::Path;

const LIMIT: usize = 80;

/// `text` with comments, string and character literals removed, line by
/// line (a brace inside one would otherwise count).
fn code_lines(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = vec![String::new()];
    let mut i = 0;
    let newline = |out: &mut Vec<String>| out.push(String::new());
    while i < chars.len() {
        let (c, next) = (chars[i], chars.get(i + 1).copied());
        match (c, next) {
            ('\n', _) => newline(&mut out),
            ('/', Some('/')) => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            ('/', Some('*')) => {
                i += 2;
                while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                    if chars[i] == '\n' {
                        newline(&mut out);
                    }
                    i += 1;
                }
                i += 2;
                continue;
            }
            ('r', Some('"' | '#')) if i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') => {
                let mut j = i + 1;
                let mut hashes = 0;
                while chars.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                if chars.get(j) != Some(&'"') {
                    out.last_mut().unwrap().push(c);
                    i += 1;
                    continue;
                }
                j += 1;
                while j < chars.len() && !(chars[j] == '"' && (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#'))) {
                    if chars[j] == '\n' {
                        newline(&mut out);
                    }
                    j += 1;
                }
                i = j + 1 + hashes;
                continue;
            }
            ('"', _) => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        i += 1;
                    } else if chars[i] == '\n' {
                        newline(&mut out);
                    }
                    i += 1;
                }
                i += 1;
                continue;
            }
            // A character literal; a lifetime has no closing quote two on.
            ('\'', Some('\\')) => {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
                continue;
            }
            ('\'', Some(_)) if chars.get(i + 2) == Some(&'\'') => {
                i += 3;
                continue;
            }
            _ => out.last_mut().unwrap().push(c),
        }
        i += 1;
    }
    out
}

/// The name of the function a line declares, if it declares one.
fn declared(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace().peekable();
    while let Some(w) = words.next() {
        match w {
            "fn" => return words.next().map(|n| n.split(['(', '<']).next().unwrap_or(n)),
            "pub" | "async" | "const" | "unsafe" | "extern" => {}
            w if w.starts_with("pub(") => {}
            _ => return None,
        }
    }
    None
}

/// (name, first line, lines) of every function of `text` over [`LIMIT`]
/// lines without a reason above it.
fn long_functions(text: &str) -> Vec<(String, usize, usize)> {
    let text = text.split("#[cfg(test)]").next().unwrap();
    let raw: Vec<&str> = text.lines().collect();
    let code = code_lines(text);
    let mut found = Vec::new();
    for (start, line) in code.iter().enumerate() {
        let Some(name) = declared(line) else { continue };
        let (mut depth, mut opened, mut end) = (0i64, false, None);
        for (k, l) in code.iter().enumerate().skip(start) {
            for c in l.chars() {
                match c {
                    '{' => (depth, opened) = (depth + 1, true),
                    '}' => depth -= 1,
                    ';' if !opened && depth == 0 => break,
                    _ => {}
                }
            }
            if !opened && l.trim_end().ends_with(';') {
                break;
            }
            if opened && depth <= 0 {
                end = Some(k);
                break;
            }
        }
        let Some(end) = end else { continue };
        let lines = end - start + 1;
        let reason =
            raw[..start].iter().rev().take_while(|l| l.trim_start().starts_with("//") || l.trim_start().starts_with("#["));
        if lines > LIMIT && !reason.clone().any(|l| l.trim_start().starts_with("// Long:")) {
            found.push((name.to_string(), start + 1, lines));
        }
    }
    found
}

#[test]
fn no_function_runs_long_without_a_reason() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut stack = vec![src.clone()];
    let (mut long, mut files) = (Vec::new(), 0);
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.to_string_lossy().ends_with("_tests.rs") {
                files += 1;
                for (name, line, lines) in long_functions(&std::fs::read_to_string(&path).unwrap()) {
                    long.push(format!("{}:{line} `{name}`, {lines} lines", path.strip_prefix(&src).unwrap().display()));
                }
            }
        }
    }
    assert!(files > 100, "the walk found only {files} files");
    assert!(
        long.is_empty(),
        "functions over {LIMIT} lines; split them into named steps, or write `// Long: why` above:\n{}",
        long.join("\n")
    );
}

/// The reader counts a body's lines, not braces in strings, characters or
/// comments, and takes a written reason.
#[test]
fn the_reader_measures_bodies_and_takes_a_reason() {
    let body = |n: usize| "    let x = 1;\n".repeat(n);
    let long = format!("pub(crate) async fn long_one() {{\n    let s = \"}}\"; let c = '}}'; // }}\n{}}}\n", body(LIMIT));
    assert_eq!(long_functions(&long), vec![("long_one".to_string(), 1, LIMIT + 3)]);
    let short = format!("fn short<T>(t: T) {{\n{}}}\nfn declared_only();\n", body(LIMIT - 2));
    assert!(long_functions(&short).is_empty());
    let excused = format!("// Long: one table of every rule.\n#[inline]\n{long}");
    assert!(long_functions(&excused).is_empty());
    let raw = format!("fn raw() {{\n    let r = r#\"{{{{\"#;\n{}}}\n", body(LIMIT));
    assert_eq!(long_functions(&raw).len(), 1, "a raw string's braces do not count");
}
