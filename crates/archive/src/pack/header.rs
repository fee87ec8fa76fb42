//! Tar headers for `pack`: a ustar header where its fields hold the entry, preceded by a pax
//! extended header ('x') for whatever they cannot hold (long names and link targets, sizes of
//! 8 GiB and more, large ids, long user names, sub-second or negative mtimes, sparse maps,
//! xattrs). This is the layout `tar --format=pax` writes, which GNU tar, bsdtar and Python's
//! tarfile all read.
//!
//! The `tar` crate's `Header` lays out the fields and computes the checksum. The name and prefix
//! fields are filled by hand: its `set_path` normalises components (drops `.`, refuses some names
//! GNU tar stores as they are) and only takes UTF-8 on some platforms, while a member name here
//! must be stored byte for byte. The pax records and the sparse 1.0 map are written by hand too:
//! the crate has no writer for the sparse map, and its `Builder` owns the output stream, which
//! here is a pipeline of parallel compressors.

use tar::{EntryType, Header};

/// Largest value of a 12-byte octal field (size, mtime): 8^11 - 1.
const MAX_OCTAL_12: u64 = 0o77777777777;
/// Largest value of an 8-byte octal field (uid, gid, device numbers): 8^7 - 1.
const MAX_OCTAL_8: u64 = 0o7777777;

/// What kind of member a header describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    Symlink,
    HardLink,
    CharDev,
    BlockDev,
    Fifo,
}

/// The fields of one member, as they go into its header(s).
#[derive(Clone, Debug)]
pub(crate) struct Fields {
    pub kind: Kind,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub uname: Vec<u8>,
    pub gname: Vec<u8>,
    /// Seconds (may be negative) and nanoseconds.
    pub mtime: (i64, u32),
    /// Bytes of data stored after the header (0 for all but regular files).
    pub size: u64,
    /// Symlink or hard link target.
    pub link: Vec<u8>,
    pub dev: (u32, u32),
    /// Extended attributes (`SCHILY.xattr.NAME` records, the name escaped as GNU tar escapes it).
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// POSIX ACLs as text: the access ACL and a folder's default one (`SCHILY.acl.access`,
    /// `SCHILY.acl.default`).
    pub acl_access: Option<Vec<u8>>,
    pub acl_default: Option<Vec<u8>>,
}

/// A sparse file's layout: data segments (offset, length) and the real size.
#[derive(Clone, Debug)]
pub(crate) struct SparseMap {
    pub segments: Vec<(u64, u64)>,
    pub realsize: u64,
}

impl SparseMap {
    /// The map block that precedes the data in pax sparse 1.0: the number of segments, then
    /// each offset and length, one decimal number per line, padded to 512 bytes.
    pub fn block(&self) -> Vec<u8> {
        let mut s = format!("{}\n", self.segments.len());
        for (o, l) in &self.segments {
            s.push_str(&format!("{o}\n{l}\n"));
        }
        let mut v = s.into_bytes();
        v.resize(v.len().div_ceil(512) * 512, 0);
        v
    }
    /// Bytes of file data stored (the sum of the segment lengths).
    pub fn data_len(&self) -> u64 {
        self.segments.iter().map(|s| s.1).sum()
    }
}

/// Appends one pax record (`"LEN KEY=VALUE\n"`, LEN counting the whole record) to `out`.
fn record(out: &mut Vec<u8>, key: impl AsRef<[u8]>, value: &[u8]) {
    let key = key.as_ref();
    let base = key.len() + value.len() + 3;
    let mut len = base + 1;
    while len != base + len.to_string().len() {
        len = base + len.to_string().len();
    }
    out.extend_from_slice(len.to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(key);
    out.push(b'=');
    out.extend_from_slice(value);
    out.push(b'\n');
}

/// Splits `name` into the ustar prefix (155) and name (100) fields, if it fits.
fn split_ustar(name: &[u8]) -> Option<(&[u8], &[u8])> {
    if name.len() <= 100 {
        return Some((&[], name));
    }
    // The prefix ends at a '/', which is not stored; the rest must be a non-empty name.
    let lo = name.len().saturating_sub(101);
    (lo..name.len().min(156)).filter(|&i| name[i] == b'/').map(|i| (&name[..i], &name[i + 1..])).find(|(p, n)| !p.is_empty() && !n.is_empty() && n.len() <= 100)
}

fn put(field: &mut [u8], v: &[u8]) {
    let n = v.len().min(field.len());
    field[..n].copy_from_slice(&v[..n]);
}

fn pax_time(t: (i64, u32)) -> String {
    if t.1 == 0 {
        return t.0.to_string();
    }
    // pax: "-1.5" is 1.5 s before the epoch, so a negative time with a fraction is written
    // as the negated distance.
    let (s, ns) = if t.0 < 0 { (-(t.0 + 1), 1_000_000_000 - t.1) } else { (t.0, t.1) };
    let frac = format!("{ns:09}");
    format!("{}{s}.{}", if t.0 < 0 { "-" } else { "" }, frac.trim_end_matches('0'))
}

/// The basename of a member name, for the pax header's own name.
fn base(name: &[u8]) -> &[u8] {
    let t = name.strip_suffix(b"/").unwrap_or(name);
    match t.iter().rposition(|&b| b == b'/') {
        Some(i) => &t[i + 1..],
        None => t,
    }
}

/// Directory part of a member name ("" or ending in '/').
fn dir_of(name: &[u8]) -> &[u8] {
    let t = name.strip_suffix(b"/").unwrap_or(name);
    match t.iter().rposition(|&b| b == b'/') {
        Some(i) => &name[..i + 1],
        None => &[],
    }
}

/// Appends the header block(s) of one member to `out`: a pax header when needed, then the
/// ustar header. For a sparse file (`sparse`), the pax sparse 1.0 records are added and the
/// ustar header describes the map block plus the data; the caller writes the map block next.
pub(crate) fn append(out: &mut Vec<u8>, name: &[u8], f: &Fields, sparse: Option<&SparseMap>) {
    let mut pax = Vec::new();
    let mut h = Header::new_ustar();
    let (stored_name, stored_size): (Vec<u8>, u64) = match sparse {
        Some(m) => {
            // GNU tar's naming for the ustar name of a sparse 1.0 member, with a fixed 0 in place
            // of the process id so that archives are reproducible.
            let mut n = dir_of(name).to_vec();
            n.extend_from_slice(b"GNUSparseFile.0/");
            n.extend_from_slice(base(name));
            record(&mut pax, "GNU.sparse.major", b"1");
            record(&mut pax, "GNU.sparse.minor", b"0");
            record(&mut pax, "GNU.sparse.name", name);
            record(&mut pax, "GNU.sparse.realsize", m.realsize.to_string().as_bytes());
            (n, m.block().len() as u64 + m.data_len())
        }
        None => (name.to_vec(), f.size),
    };
    let binary = std::str::from_utf8(name).is_err() || std::str::from_utf8(&f.link).is_err();
    // A header made by new_ustar() always has the ustar layout.
    if let Some(u) = h.as_ustar_mut() {
        match split_ustar(&stored_name) {
            Some((prefix, n)) => {
                put(&mut u.prefix, prefix);
                put(&mut u.name, n);
            }
            None => {
                if sparse.is_none() {
                    record(&mut pax, "path", name);
                }
                // Readers that ignore pax still see the start of the name.
                put(&mut u.name, &stored_name[..stored_name.len().min(100)]);
            }
        }
        if f.link.len() > 100 {
            record(&mut pax, "linkpath", &f.link);
        }
        put(&mut u.linkname, &f.link);
        if f.uname.len() > 32 {
            record(&mut pax, "uname", &f.uname);
        } else {
            put(&mut u.uname, &f.uname);
        }
        if f.gname.len() > 32 {
            record(&mut pax, "gname", &f.gname);
        } else {
            put(&mut u.gname, &f.gname);
        }
    }
    if binary && !pax.is_empty() {
        // Names that are not UTF-8 are stored as they are (GNU tar and libarchive read this).
        let mut with = Vec::new();
        record(&mut with, "hdrcharset", b"BINARY");
        with.extend_from_slice(&pax);
        pax = with;
    }
    h.set_mode(f.mode & 0o7777);
    if f.uid > MAX_OCTAL_8 {
        record(&mut pax, "uid", f.uid.to_string().as_bytes());
        h.set_uid(0);
    } else {
        h.set_uid(f.uid);
    }
    if f.gid > MAX_OCTAL_8 {
        record(&mut pax, "gid", f.gid.to_string().as_bytes());
        h.set_gid(0);
    } else {
        h.set_gid(f.gid);
    }
    if stored_size > MAX_OCTAL_12 {
        record(&mut pax, "size", stored_size.to_string().as_bytes());
        h.set_size(0);
    } else {
        h.set_size(stored_size);
    }
    // The ustar field holds 0..=8^11-1; anything else (and any fraction) goes to pax.
    let ustar_mtime = u64::try_from(f.mtime.0).ok().filter(|&t| t <= MAX_OCTAL_12);
    if f.mtime.1 != 0 || ustar_mtime.is_none() {
        record(&mut pax, "mtime", pax_time(f.mtime).as_bytes());
    }
    let clamped_mtime = ustar_mtime.unwrap_or(if f.mtime.0 < 0 { 0 } else { MAX_OCTAL_12 });
    h.set_mtime(clamped_mtime);
    h.set_entry_type(match f.kind {
        Kind::File => EntryType::Regular,
        Kind::Dir => EntryType::Directory,
        Kind::Symlink => EntryType::Symlink,
        Kind::HardLink => EntryType::Link,
        Kind::CharDev => EntryType::Char,
        Kind::BlockDev => EntryType::Block,
        Kind::Fifo => EntryType::Fifo,
    });
    if matches!(f.kind, Kind::CharDev | Kind::BlockDev) {
        // Checked by the caller: device numbers above 8^7-1 have no standard pax record.
        let _ = h.set_device_major(f.dev.0);
        let _ = h.set_device_minor(f.dev.1);
    }
    if let Some(t) = &f.acl_access {
        record(&mut pax, b"SCHILY.acl.access", t);
    }
    if let Some(t) = &f.acl_default {
        record(&mut pax, b"SCHILY.acl.default", t);
    }
    for (k, v) in &f.xattrs {
        // GNU tar's escapes for '=' and '%' in the name (raw bytes otherwise: a name need not
        // be UTF-8).
        let mut key = b"SCHILY.xattr.".to_vec();
        key.extend_from_slice(&crate::tarparse::xattr_key_encode(k));
        record(&mut pax, &key, v);
    }
    h.set_cksum();
    if !pax.is_empty() {
        let mut x = Header::new_ustar();
        let mut xname = dir_of(name).to_vec();
        xname.extend_from_slice(b"PaxHeaders/");
        xname.extend_from_slice(base(name));
        if let Some(u) = x.as_ustar_mut() {
            put(&mut u.name, &xname[..xname.len().min(100)]);
        }
        x.set_mode(0o644);
        x.set_uid(f.uid.min(MAX_OCTAL_8));
        x.set_gid(f.gid.min(MAX_OCTAL_8));
        x.set_mtime(clamped_mtime);
        x.set_size(pax.len() as u64);
        x.set_entry_type(EntryType::XHeader);
        x.set_cksum();
        out.extend_from_slice(x.as_bytes());
        out.extend_from_slice(&pax);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.extend_from_slice(h.as_bytes());
    if let Some(m) = sparse {
        out.extend_from_slice(&m.block());
    }
}

/// Whether device numbers fit the ustar fields (there is no standard pax record for them).
pub(crate) fn dev_fits(dev: (u32, u32)) -> bool {
    u64::from(dev.0) <= MAX_OCTAL_8 && u64::from(dev.1) <= MAX_OCTAL_8
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(kind: Kind) -> Fields {
        Fields {
            kind,
            mode: 0o644,
            uid: 0,
            gid: 0,
            uname: b"root".to_vec(),
            gname: b"root".to_vec(),
            mtime: (1_600_000_000, 0),
            size: 0,
            link: Vec::new(),
            dev: (0, 0),
            xattrs: Vec::new(),
            acl_access: None,
            acl_default: None,
        }
    }

    #[test]
    fn pax_record_length_counts_itself() {
        for n in [0usize, 1, 5, 89, 90, 91, 95, 96, 990, 995, 996, 9990] {
            let mut v = Vec::new();
            record(&mut v, "path", &vec![b'a'; n]);
            let sp = v.iter().position(|&b| b == b' ').unwrap();
            let len: usize = std::str::from_utf8(&v[..sp]).unwrap().parse().unwrap();
            assert_eq!(len, v.len(), "value length {n}");
        }
    }

    #[test]
    fn ustar_split_uses_prefix_and_falls_back_to_pax() {
        let short = b"a/b";
        assert_eq!(split_ustar(short), Some((&b""[..], &b"a/b"[..])));
        let mut long = vec![b'd'; 120];
        long.extend_from_slice(b"/file");
        let (p, n) = split_ustar(&long).unwrap();
        assert_eq!((p.len(), n), (120, &b"file"[..]));
        assert!(split_ustar(&[b'x'; 101]).is_none(), "no slash: cannot split");
        let mut out = Vec::new();
        append(&mut out, &vec![b'x'; 300], &fields(Kind::File), None);
        assert_eq!(out.len(), 3 * 512, "pax header, its records, ustar header");
        assert_eq!(out[156], b'x');
    }

    #[test]
    fn pax_times_keep_the_fraction_and_the_sign() {
        assert_eq!(pax_time((5, 0)), "5");
        assert_eq!(pax_time((5, 120_000_000)), "5.12");
        assert_eq!(pax_time((-2, 500_000_000)), "-1.5");
    }

    #[test]
    fn sparse_map_block_is_decimal_lines_padded() {
        let m = SparseMap { segments: vec![(0, 10), (4096, 5)], realsize: 10000 };
        let b = m.block();
        assert_eq!(b.len(), 512);
        assert!(b.starts_with(b"2\n0\n10\n4096\n5\n\0"));
        assert_eq!(m.data_len(), 15);
    }
}
