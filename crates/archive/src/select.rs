//! Which members a command takes, by GNU tar's rules: `--exclude` patterns (unanchored: the
//! whole name or any tail of it that starts at a component, or a leading part of those ending at
//! one, so that a folder's pattern takes what is below it; wildcards match '/'), and the
//! member names an extraction is given (the name as stored, or a folder of it).

/// Whether `name` (a member name as stored or formed) matches one of `patterns`.
pub fn excluded(patterns: &[glob::Pattern], name: &[u8]) -> bool {
    if patterns.is_empty() {
        return false;
    }
    let n = String::from_utf8_lossy(name);
    let n = n.trim_end_matches('/');
    let n = n.strip_prefix("./").unwrap_or(n);
    // Every run of whole components: a tail (unanchored) and, of it, every leading part (a
    // pattern matching a folder takes what is below it, as fnmatch's FNM_LEADING_DIR).
    let starts = std::iter::once(0).chain(n.match_indices('/').map(|(i, _)| i + 1));
    let ends: Vec<usize> = n.match_indices('/').map(|(i, _)| i).chain(std::iter::once(n.len())).collect();
    starts.into_iter().any(|a| ends.iter().filter(|&&b| b > a).any(|&b| patterns.iter().any(|p| p.matches(&n[a..b]))))
}

/// The member names an extraction was given, and which of them a member matched.
#[derive(Debug, Default)]
pub struct Members {
    names: Vec<Vec<u8>>,
    found: Vec<bool>,
}

impl Members {
    /// Names as given; trailing slashes do not count (GNU tar's).
    pub fn new(names: &[Vec<u8>]) -> Members {
        let names: Vec<Vec<u8>> = names
            .iter()
            .map(|n| {
                let mut n = n.clone();
                while n.len() > 1 && n.ends_with(b"/") {
                    n.pop();
                }
                n
            })
            .collect();
        Members { found: vec![false; names.len()], names }
    }

    /// Whether the member `path` (as stored) is taken: every member when no name was given,
    /// else one named exactly, or below a folder named (GNU tar does not match `./a` to `a`).
    pub fn take(&mut self, path: &[u8]) -> bool {
        self.take_index(path).is_some()
    }

    /// As [`Members::take`], saying which name took it: the first that matched (0 where no
    /// name was given), `None` where none did.
    pub fn take_index(&mut self, path: &[u8]) -> Option<usize> {
        if self.names.is_empty() {
            return Some(0);
        }
        let p = path.strip_suffix(b"/").unwrap_or(path);
        let mut first = None;
        for (i, (n, found)) in self.names.iter().zip(self.found.iter_mut()).enumerate() {
            if p == n.as_slice() || (p.len() > n.len() && p.starts_with(n) && p[n.len()] == b'/') {
                *found = true;
                first = first.or(Some(i));
            }
        }
        first
    }

    /// The names no member matched.
    pub fn not_found(&self) -> impl Iterator<Item = &[u8]> {
        self.names.iter().zip(&self.found).filter(|(_, f)| !**f).map(|(n, _)| n.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_names_match_as_gnu_tar_matches_them() {
        let mut m = Members::new(&[b"a".to_vec(), b"b/c/".to_vec(), b"./d".to_vec()]);
        assert!(m.take(b"a") && m.take(b"a/x/y") && m.take(b"b/c") && m.take(b"b/c/z") && m.take(b"./d/e"));
        assert!(!m.take(b"ab") && !m.take(b"b") && !m.take(b"./a") && !m.take(b"d"));
        assert_eq!(m.not_found().count(), 0);
        let mut m = Members::new(&[b"x".to_vec()]);
        assert!(!m.take(b"y"));
        assert_eq!(m.not_found().collect::<Vec<_>>(), vec![&b"x"[..]]);
        assert!(Members::new(&[]).take(b"anything"));
    }

    #[test]
    fn exclusions_match_any_tail_of_a_name() {
        let p = vec![glob::Pattern::new("*.o").unwrap(), glob::Pattern::new("tmp").unwrap()];
        assert!(excluded(&p, b"./src/x.o") && excluded(&p, b"a/tmp/") && excluded(&p, b"tmp"));
        assert!(!excluded(&p, b"a/tmpx") && !excluded(&p, b"x.oo"));
        // What is below an excluded folder is excluded too.
        assert!(excluded(&p, b"./a/tmp/deeper/file") && excluded(&p, b"tmp/x"));
        let deep = vec![glob::Pattern::new("a/*/c").unwrap()];
        assert!(excluded(&deep, b"./a/b/c/d") && excluded(&deep, b"z/a/b/c") && !excluded(&deep, b"a/b/cd"));
    }
}

/// `--one-top-level`'s folder `top` as the components [`under_top`] takes.
pub fn top_components(top: &[u8]) -> Vec<Vec<u8>> {
    top.split(|&b| b == b'/').filter(|c| !c.is_empty() && *c != b".").map(<[u8]>::to_vec).collect()
}

/// GNU tar `--one-top-level=DIR`: the member's path `rel` (made safe, components stripped) under
/// `top` (see [`top_components`]), unless it is there already; the member `./` is `top` itself.
pub fn under_top(top: &[Vec<u8>], rel: crate::fsops::RelPath) -> crate::fsops::RelPath {
    if rel.0.starts_with(top) {
        return rel;
    }
    crate::fsops::RelPath(top.iter().cloned().chain(rel.0).collect())
}

/// The folder `--one-top-level` without a name extracts into: the archive's file name less its
/// compression suffix (`.tar`, `.tgz`, `.tar.gz`, `.tar.zst`, ... as GNU tar 1.34 knows them;
/// `.tar` after another suffix only where that one does not begin with `t`). `None` where it
/// has none of them, or nothing is left (GNU: "Cannot deduce top-level directory name").
pub fn top_of_archive(file_name: &[u8]) -> Option<Vec<u8>> {
    const SUFFIXES: &[&[u8]] =
        &[b"tar", b"gz", b"tgz", b"taz", b"Z", b"taZ", b"bz2", b"tbz", b"tbz2", b"tz2", b"lz", b"lzma", b"tlz", b"lzo", b"xz", b"txz", b"zst", b"tzst"];
    let dot = file_name.iter().rposition(|&b| b == b'.')?;
    let suffix = &file_name[dot + 1..];
    if !SUFFIXES.contains(&suffix) {
        return None;
    }
    let mut len = dot;
    if len > 4 && &file_name[len - 4..len] == b".tar" && suffix[0] != b't' {
        len -= 4;
    }
    (len > 0).then(|| file_name[..len].to_vec())
}

#[cfg(test)]
mod top_tests {
    use super::*;

    #[test]
    fn names_under_one_top_level_folder() {
        let t = |n: &[&str]| under_top(&top_components(b"./top/"), crate::fsops::RelPath(n.iter().map(|c| c.as_bytes().to_vec()).collect())).to_path();
        assert_eq!(t(&["a", "b"]), std::path::Path::new("top/a/b"));
        assert_eq!(t(&["top"]), std::path::Path::new("top"));
        assert_eq!(t(&["top", "x"]), std::path::Path::new("top/x"));
        assert_eq!(t(&["topx", "y"]), std::path::Path::new("top/topx/y"));
        assert_eq!(t(&[]), std::path::Path::new("top"));
        let a = |n: &str| top_of_archive(n.as_bytes()).map(|v| String::from_utf8(v).unwrap());
        assert_eq!(a("a.tar").as_deref(), Some("a"));
        assert_eq!(a("a.tar.gz").as_deref(), Some("a"));
        assert_eq!(a("a.tgz").as_deref(), Some("a"));
        assert_eq!(a("a.tar.tzst").as_deref(), Some("a.tar"));
        assert_eq!(a("x.y.zst").as_deref(), Some("x.y"));
        assert_eq!(a("archive"), None);
        assert_eq!(a(".tar"), None);
        assert_eq!(a("a.zip"), None);
    }
}
