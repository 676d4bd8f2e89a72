#!/usr/bin/env python3
"""Count Rust functions longer than LIMIT lines (from the `fn` line to the closing brace).

Rules:
- The source is first blanked lexically (comments, string/byte/raw-string literals and char
  literals replaced by spaces, newlines kept), so braces inside `'{'`, `"{"`, `r#"..."#` or
  comments do not move the brace count (the previous version counted `'{'` and multi-line
  strings, e.g. console `fleet.rs::parse` came out as 689 lines).
- A `fn` whose signature reaches `;` (outside parentheses/brackets) before `{` is a declaration
  and is skipped.
- A function is "test" when its file is under `tests/`, `benches/` or a `*-testkit` crate, or it
  lies inside a `#[cfg(test)]` item (e.g. `#[cfg(test)] mod tests { ... }`) in a src file, or it is
  marked `#[test]`/`#[tokio::test]`. Everything else is "src".
- Nested functions are counted on their own as well (their lines also count toward the outer one).

Usage: python3 longfns.py DIR [--limit N] [--all]   (--all also lists the test functions)
"""
import os, re, sys

args = sys.argv[1:]
limit = 80
if '--limit' in args:
    k = args.index('--limit'); limit = int(args[k + 1]); del args[k:k + 2]
show_all = '--all' in args
args = [a for a in args if a != '--all']
root = args[0]

IDENT = re.compile(r'[A-Za-z0-9_]')


def blank(src):
    """src with comments and literals replaced by spaces (newlines kept, same length)."""
    out = list(src); n = len(src); i = 0

    def wipe(a, b):
        for k in range(a, min(b, n)):
            if out[k] != '\n':
                out[k] = ' '

    while i < n:
        c = src[i]
        nxt = src[i + 1] if i + 1 < n else ''
        if c == '/' and nxt == '/':
            j = src.find('\n', i)
            j = n if j < 0 else j
            wipe(i, j); i = j; continue
        if c == '/' and nxt == '*':
            depth = 0; j = i
            while j < n:
                if src.startswith('/*', j): depth += 1; j += 2; continue
                if src.startswith('*/', j):
                    depth -= 1; j += 2
                    if depth == 0: break
                    continue
                j += 1
            wipe(i, j); i = j; continue
        prev_ident = i > 0 and IDENT.match(src[i - 1])
        # raw strings: r"..", r#".."#, br#".."#, cr".."
        m = None if prev_ident else re.compile(r'(?:b|c)?r(#*)"').match(src, i)
        if m:
            hashes = m.group(1)
            end = src.find('"' + hashes, m.end())
            end = n if end < 0 else end + 1 + len(hashes)
            wipe(i, end); i = end; continue
        if c == '"' or (not prev_ident and c in 'bc' and nxt == '"'):
            j = i + (1 if c == '"' else 2)
            while j < n and src[j] != '"':
                j += 2 if src[j] == '\\' else 1
            wipe(i, j + 1); i = j + 1; continue
        if c == "'" or (not prev_ident and c == 'b' and nxt == "'"):
            s = i if c == "'" else i + 1
            if s + 1 < n and src[s + 1] == '\\':
                j = s + 2
                while j < n and src[j] != "'":
                    j += 1
                wipe(i, j + 1); i = j + 1; continue
            if s + 2 < n and src[s + 2] == "'":
                wipe(i, s + 3); i = s + 3; continue
            i = s + 1; continue  # a lifetime or label
        i += 1
    return ''.join(out)


def match_brace(text, open_at):
    depth = 0
    for k in range(open_at, len(text)):
        if text[k] == '{': depth += 1
        elif text[k] == '}':
            depth -= 1
            if depth == 0: return k
    return len(text) - 1


def body_start(text, after):
    """Index of the body's `{` of a fn whose name ends at `after`, or None for a declaration."""
    depth = 0
    for k in range(after, len(text)):
        ch = text[k]
        if ch in '([': depth += 1
        elif ch in ')]': depth -= 1
        elif ch == ';' and depth == 0: return None
        elif ch == '{' and depth == 0: return k
    return None


FN = re.compile(r'\bfn\s+([A-Za-z_]\w*)')
CFG_TEST = re.compile(r'#\[cfg\(\s*test\s*\)\]')
TEST_ATTR = re.compile(r'#\[(?:tokio::)?test\b[^\]]*\]\s*(?:#\[[^\]]*\]\s*)*(?:pub\s+)?(?:async\s+)?$')

res = []
for dp, dn, fn in os.walk(root):
    dn[:] = [d for d in dn if d not in ('target', '.git', 'node_modules')]
    for f in fn:
        if not f.endswith('.rs'): continue
        p = os.path.join(dp, f)
        in_test_tree = bool(re.search(r'/(tests|benches)/|-testkit/', p))
        src = open(p, errors='replace').read()
        text = blank(src)
        line_at = lambda k: text.count('\n', 0, k) + 1
        # byte ranges of #[cfg(test)] items that have a brace body (mod tests { .. }, fn, impl)
        test_ranges = []
        for m in CFG_TEST.finditer(text):
            k = m.end()
            while k < len(text) and text[k] not in '{;': k += 1
            if k < len(text) and text[k] == '{':
                test_ranges.append((m.start(), match_brace(text, k)))
        for m in FN.finditer(text):
            b = body_start(text, m.end())
            if b is None: continue
            e = match_brace(text, b)
            first, last = line_at(m.start()), line_at(e)
            n = last - first + 1
            if n <= limit: continue
            line_start = text.rfind('\n', 0, m.start()) + 1
            before = text[max(0, line_start - 300):m.start()]
            is_test = (in_test_tree or any(a <= m.start() <= z for a, z in test_ranges)
                       or bool(TEST_ATTR.search(before.rstrip() + ' ')))
            res.append((n, p, first, m.group(1), is_test))

src_fns = [r for r in res if not r[4]]
print("src", len(src_fns), "tests", len(res) - len(src_fns))
for r in sorted(src_fns, reverse=True): print(r[0], r[1], r[2], r[3])
if show_all:
    print('-- test functions')
    for r in sorted([r for r in res if r[4]], reverse=True): print(r[0], r[1], r[2], r[3])
