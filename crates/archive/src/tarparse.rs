//! A streaming tar parser over any `Read`.
//!
//! The `tar` crate serves for the header layout (`tar::Header`, `as_ustar`, `as_gnu`, `path_bytes`,
//! `link_name_bytes`, `entry_type`). What is added here, because its `Archive`/`Entry` API does
//! not give it: pax records split by their length (a value may hold any byte, a newline
//! among them: ACLs, xattr values, names), numeric fields parsed strictly
//! (octal and base-256, negative values and overflow rejected instead of wrapped), checksum
//! verification in both signed and unsigned forms, the GNU old sparse map as a list of segments
//! (its `Entry` expands holes into zeros, which would write 8 GiB of zeros for an 8 GiB sparse
//! file), pax sparse formats 0.0, 0.1 and 1.0 (not handled by the crate at all), pax size/uid/gid/
//! fractional mtime overrides, pax global headers, and archive offsets for every error.
//!
//! As GNU tar, a header whose checksum is wrong is reported and skipped (the blocks after it are
//! looked at until one is a valid header), and a pax value that makes no sense is reported and
//! ignored (the header's own field stands): both are [`Parser::take_problems`], and the
//! archive goes on. An input with no byte at all is not an archive.

use std::io::{self, Read};

use crate::error::{Error, Result};

const BLOCK: u64 = 512;
/// Longest GNU long name / long link accepted (GNU tar itself has no limit; PATH_MAX is 4096).
const MAX_LONGNAME: u64 = 1 << 20;
/// Largest pax extended header accepted.
const MAX_PAX: u64 = 16 << 20;
/// Largest number of sparse segments accepted.
const MAX_SPARSE_SEGMENTS: usize = 1 << 20;
/// Largest file size accepted (i64::MAX: what the filesystem can represent).
const MAX_SIZE: u64 = i64::MAX as u64;

/// The kind of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Regular file (types '0', '\0', '7').
    File,
    /// Hard link to an earlier entry ('1').
    HardLink,
    /// Symbolic link ('2').
    Symlink,
    /// Character device ('3').
    CharDev,
    /// Block device ('4').
    BlockDev,
    /// Directory ('5', GNU 'D', or a v7 name ending in '/').
    Dir,
    /// FIFO ('6').
    Fifo,
}

/// One archive member, with every extension applied.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Member name as stored (after GNU long name / pax path), raw bytes.
    pub path: Vec<u8>,
    /// Link target for symlinks and hard links.
    pub link: Option<Vec<u8>>,
    /// Entry kind.
    pub kind: Kind,
    /// Permission bits (07777).
    pub mode: u32,
    /// Owner.
    pub uid: u64,
    /// Group.
    pub gid: u64,
    /// The owner's and the group's names, where the archive gives them (ustar, GNU and pax
    /// `uname`/`gname`); empty where it does not.
    pub uname: Vec<u8>,
    /// See `uname`.
    pub gname: Vec<u8>,
    /// Modification time: seconds (may be negative) and nanoseconds.
    pub mtime: (i64, u32),
    /// Logical size of the file (the real size for sparse files).
    pub size: u64,
    /// Bytes of data stored in the archive after the header(s) (padded to 512 when skipping).
    pub data_len: u64,
    /// Sparse map (offset, length) in file coordinates; data for these segments follows in order.
    pub sparse: Option<Vec<(u64, u64)>>,
    /// Device numbers for device nodes.
    pub dev: (u32, u32),
    /// Offset of this entry's first header in the tar stream.
    pub offset: u64,
    /// Extended attributes, name and value, in the archive's order (pax `SCHILY.xattr.NAME`
    /// records, the name with GNU tar's `%3D`/`%25` escapes undone; a later record of the same
    /// name replaces an earlier one).
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// POSIX ACLs as text (pax `SCHILY.acl.access` and `SCHILY.acl.default`, the star format
    /// GNU tar `--acls` writes), where the archive has them.
    pub acl_access: Option<Vec<u8>>,
    /// See `acl_access`.
    pub acl_default: Option<Vec<u8>>,
}

impl Entry {
    /// The member name for messages.
    pub fn display(&self) -> String {
        String::from_utf8_lossy(&self.path).into_owned()
    }
}

#[derive(Default, Clone)]
struct Pax {
    path: Option<Vec<u8>>,
    linkpath: Option<Vec<u8>>,
    size: Option<u64>,
    uid: Option<u64>,
    gid: Option<u64>,
    mtime: Option<(i64, u32)>,
    uname: Option<Vec<u8>>,
    gname: Option<Vec<u8>>,
    sparse_major: Option<u64>,
    sparse_minor: Option<u64>,
    sparse_name: Option<Vec<u8>>,
    sparse_realsize: Option<u64>,
    sparse_map: Vec<u64>,
    sparse_offset_pending: Option<u64>,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    acl_access: Option<Vec<u8>>,
    acl_default: Option<Vec<u8>>,
}

/// An xattr name as GNU tar writes it in a pax key: '=' as "%3D" and '%' as "%25" (a key
/// holding '=' could not be told from its value).
pub fn xattr_key_decode(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len());
    let mut i = 0;
    while i < key.len() {
        match &key[i..] {
            [b'%', b'3', b'D', ..] => {
                out.push(b'=');
                i += 3;
            }
            [b'%', b'2', b'5', ..] => {
                out.push(b'%');
                i += 3;
            }
            [c, ..] => {
                out.push(*c);
                i += 1;
            }
            [] => unreachable!(),
        }
    }
    out
}

/// The reverse of [`xattr_key_decode`], for writing.
pub fn xattr_key_encode(name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len());
    for &c in name {
        match c {
            b'=' => out.extend_from_slice(b"%3D"),
            b'%' => out.extend_from_slice(b"%25"),
            c => out.push(c),
        }
    }
    out
}

/// Streaming parser: call [`Parser::next_entry`], then read the entry's data through
/// [`Parser::read_data`] (or not: the rest is skipped on the next call).
pub struct Parser<R: Read> {
    r: R,
    pos: u64,
    /// Data bytes of the current entry not yet consumed.
    remaining: u64,
    /// Padding after the current entry's data.
    pad: u64,
    global: Pax,
    /// The current member's name as stored, raw: made a `String` only when an error names it
    /// (a lossy copy for every header cost two allocations per entry).
    cur_name: Vec<u8>,
    /// Buffer for skipping data, allocated on the first skip longer than a block.
    scratch: Vec<u8>,
    ended: bool,
    /// Zero blocks are skipped rather than taken as the end (GNU tar `-i`, `--ignore-zeros`:
    /// archives written one after another, `cat a.tar b.tar`); the input's end ends it.
    ignore_zeros: bool,
    /// Warnings since the last [`Parser::take_warnings`] (GNU tar's, in its words).
    warnings: Vec<String>,
    /// An input of no bytes is an empty archive (what a compressed stream of nothing
    /// decompresses to: GNU tar extracts nothing from it), not "no tar archive".
    empty_ok: bool,
    /// What was wrong but skipped since the last [`Parser::take_problems`].
    problems: Vec<Error>,
}

/// Bytes skipped per read (and the size of the buffer for it).
const SKIP_CHUNK: usize = 64 * 1024;

fn lossy(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

fn corrupt(reason: impl Into<String>, entry: &[u8], offset: u64) -> Error {
    Error::Corrupt { reason: reason.into(), entry: lossy(entry), offset }
}

/// A pax value that makes no sense, ignored: said as GNU tar says it.
fn malformed(e: Error, key: &[u8], val: &[u8]) -> Error {
    match e {
        Error::Corrupt { entry, offset, .. } => {
            Error::Corrupt { reason: format!("malformed extended header: invalid {}={} (ignored)", lossy(key), lossy(val)), entry, offset }
        }
        e => e,
    }
}

/// A corrupt header that was skipped, said as GNU tar says it.
fn corrupt_skipped(e: Error) -> Error {
    match e {
        Error::Corrupt { reason, entry, offset } => Error::Corrupt { reason: format!("{reason}; skipping to next header"), entry, offset },
        e => e,
    }
}

/// The records of a pax extended header, each "LENGTH KEY=VALUE\n", split by their length:
/// the value is every byte up to the record's last (a newline), newlines and NULs included.
/// A record whose length does not frame it ends the list with an error.
fn pax_records(data: &[u8]) -> impl Iterator<Item = std::result::Result<(&[u8], &[u8]), String>> + '_ {
    let mut rest = data;
    std::iter::from_fn(move || {
        // GNU tar and libarchive stop at a NUL where a record would start (padding).
        if rest.is_empty() || rest[0] == 0 {
            return None;
        }
        let r = (|| {
            let sp = rest.iter().position(|&b| b == b' ').ok_or("missing length")?;
            let len: usize = std::str::from_utf8(&rest[..sp]).ok().and_then(|n| n.parse().ok()).ok_or("bad length")?;
            if len <= sp + 1 || len > rest.len() || rest[len - 1] != b'\n' {
                return Err("length does not frame the record");
            }
            let body = &rest[sp + 1..len - 1];
            let eq = body.iter().position(|&b| b == b'=').ok_or("missing equal sign")?;
            let out = (&body[..eq], &body[eq + 1..]);
            rest = &rest[len..];
            Ok(out)
        })();
        if r.is_err() {
            rest = &[];
        }
        Some(r.map_err(|e| format!("malformed extended header: {e}")))
    })
}

/// Parses a numeric header field: octal (NUL/space terminated) or GNU base-256 (high bit set).
/// Negative base-256 values are returned as negative; values that do not fit i64 are an error.
pub fn parse_numeric(field: &[u8]) -> std::result::Result<i64, String> {
    if field.is_empty() {
        return Ok(0);
    }
    if field[0] & 0x80 != 0 {
        // Base-256, two's complement; 0x80 positive, 0xff negative.
        let neg = field[0] & 0x40 != 0;
        let mut v = i128::from(field[0] & 0x3f);
        if neg {
            v -= 0x40;
        }
        for &b in &field[1..] {
            v = v.checked_mul(256).and_then(|v| v.checked_add(i128::from(b))).ok_or("base-256 field overflows")?;
            if i64::try_from(v).is_err() {
                return Err("base-256 field overflows".into());
            }
        }
        return i64::try_from(v).map_err(|_| "base-256 field overflows".into());
    }
    if field.iter().all(|&b| b == 0) {
        return Ok(0);
    }
    let mut v: i64 = 0;
    let mut i = 0;
    while i < field.len() && field[i] == b' ' {
        i += 1;
    }
    while i < field.len() {
        let b = field[i];
        match b {
            b'0'..=b'7' => {
                v = v.checked_mul(8).and_then(|v| v.checked_add(i64::from(b - b'0'))).ok_or("octal field overflows")?;
            }
            b' ' | 0 => break,
            _ => return Err(format!("invalid octal digit {:?} in numeric field", b as char)),
        }
        i += 1;
    }
    Ok(v)
}

fn unsigned(field: &[u8], what: &str, name: &[u8], off: u64) -> Result<u64> {
    let v = parse_numeric(field).map_err(|e| corrupt(format!("{what}: {e}"), name, off))?;
    u64::try_from(v).map_err(|_| corrupt(format!("negative {what} ({v})"), name, off))
}

fn nul_trim(b: &[u8]) -> &[u8] {
    match b.iter().position(|&c| c == 0) {
        Some(p) => &b[..p],
        None => b,
    }
}

/// A header's checksums: the sum of its bytes with the checksum field read as 8 spaces, and the
/// historic signed sum some tars wrote (each byte as a two's complement i8: 256 less for each
/// byte from 0x80 up; spaces are below it). Summed in plain loops the compiler vectorises.
fn header_sums(block: &[u8; 512]) -> (i64, i64) {
    let (head, rest) = block.split_at(148);
    let tail = &rest[8..];
    let sum = |b: &[u8]| b.iter().map(|&b| u32::from(b)).sum::<u32>();
    let high = |b: &[u8]| b.iter().map(|&b| u32::from(b >> 7)).sum::<u32>();
    let u = i64::from(sum(head) + sum(tail) + 8 * u32::from(b' '));
    (u, u - 256 * i64::from(high(head) + high(tail)))
}

/// Nanoseconds per unit of each fraction digit: 10^8 for the first, down to 1 for the ninth.
pub(crate) const DIGIT_SCALES: [u32; 9] = [100_000_000, 10_000_000, 1_000_000, 100_000, 10_000, 1_000, 100, 10, 1];

/// A pax time: decimal seconds with an optional fraction ("1600000000.5", "-1.5"), or the
/// same with an exponent ("1e-09", as Python's tarfile writes a float's repr), exact to the
/// nanosecond (digits past the ninth are cut, as GNU tar cuts them).
fn parse_pax_time(v: &str) -> Option<(i64, u32)> {
    let (mant, exp) = match v.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().ok().filter(|e| e.abs() <= 30)?),
        None => (v, 0),
    };
    let (neg, mant) = match mant.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mant),
    };
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    if int.is_empty() && frac.is_empty() || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    // The digits and where the point falls among them, moved by the exponent.
    let digits: Vec<u8> = int.bytes().chain(frac.bytes()).map(|b| b - b'0').collect();
    let point = i64::try_from(int.len()).ok()? + i64::from(exp);
    let at = |i: i64| usize::try_from(i).ok().and_then(|i| digits.get(i)).copied().unwrap_or(0);
    let mut secs: i64 = 0;
    for i in 0..point {
        secs = secs.checked_mul(10)?.checked_add(i64::from(at(i)))?;
    }
    let mut nanos: u32 = 0;
    for (k, scale) in (0i64..).zip(DIGIT_SCALES) {
        nanos += u32::from(at(point + k)) * scale;
    }
    if !neg {
        return Some((secs, nanos));
    }
    if nanos > 0 {
        // "-1.5" means 1.5 s before the epoch: -2 s + 0.5 s.
        return Some((-secs - 1, 1_000_000_000 - nanos));
    }
    Some((-secs, 0))
}

impl<R: Read> Parser<R> {
    /// Starts parsing at offset 0 of `r`.
    pub fn new(r: R) -> Self {
        Parser {
            r,
            pos: 0,
            remaining: 0,
            pad: 0,
            global: Pax::default(),
            cur_name: Vec::new(),
            scratch: Vec::new(),
            ended: false,
            ignore_zeros: false,
            empty_ok: false,
            warnings: Vec::new(),
            problems: Vec::new(),
        }
    }

    /// Takes an input of no bytes as an empty archive (a compressed stream of nothing, which
    /// GNU tar extracts as nothing), rather than refusing it as no tar archive.
    pub fn empty_ok(mut self, on: bool) -> Self {
        self.empty_ok = on;
        self
    }

    /// Skips zero blocks rather than ending there (GNU tar `-i`): archives one after another
    /// are read as one.
    pub fn ignore_zeros(mut self, on: bool) -> Self {
        self.ignore_zeros = on;
        self
    }

    /// What was wrong in the archive but skipped (a bad header, a pax value that makes no
    /// sense) since the last call: each is an error of the archive that the extraction reports,
    /// as GNU tar does, and goes on past.
    pub fn take_problems(&mut self) -> Vec<Error> {
        std::mem::take(&mut self.problems)
    }

    /// What GNU tar warns of on the way (an extended header keyword it does not know), since the
    /// last call: said, and the archive goes on.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// Offset in the tar stream consumed so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The current member's name, for messages.
    fn name(&self) -> String {
        lossy(&self.cur_name)
    }

    /// Makes `name` the current member's name (reusing the buffer).
    fn set_name(&mut self, name: &[u8]) {
        self.cur_name.clear();
        self.cur_name.extend_from_slice(name);
    }

    /// The stream being parsed.
    pub fn get_ref(&self) -> &R {
        &self.r
    }

    /// Reads exactly `buf.len()` bytes; `Ok(false)` on a clean EOF before the first byte.
    fn fill(&mut self, buf: &mut [u8], what: &'static str) -> Result<bool> {
        let mut got = 0;
        while got < buf.len() {
            match self.r.read(&mut buf[got..]) {
                Ok(0) => {
                    if got == 0 {
                        return Ok(false);
                    }
                    // Report where the cut block starts.
                    let offset = self.pos;
                    self.pos += got as u64;
                    return Err(Error::Truncated { what, entry: self.name(), offset });
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.read_error(e)),
            }
        }
        self.pos += got as u64;
        Ok(true)
    }

    fn read_error(&self, e: io::Error) -> Error {
        let e = match Error::from_engine_io(e) {
            Ok(engine) => return engine,
            Err(e) => e,
        };
        match e.kind() {
            io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput | io::ErrorKind::UnexpectedEof | io::ErrorKind::Other => {
                Error::Decompress { entry: self.name(), offset: self.pos, error: e }
            }
            _ => Error::io("read", "archive", e),
        }
    }

    fn skip(&mut self, n: u64, what: &'static str) -> Result<()> {
        // The padding after each member's data (under a block) is skipped through a block on
        // the stack; longer runs through the parser's buffer. A 64 KiB array zeroed on every
        // call cost more than the rest of the header's parsing.
        if n <= BLOCK {
            let mut buf = [0u8; 512];
            return self.skip_with(n, &mut buf, what);
        }
        let mut buf = std::mem::take(&mut self.scratch);
        buf.resize(SKIP_CHUNK, 0);
        let r = self.skip_with(n, &mut buf, what);
        self.scratch = buf;
        r
    }

    /// Skips `n` bytes, reading them into `buf` (at most its length at a time).
    fn skip_with(&mut self, mut n: u64, buf: &mut [u8], what: &'static str) -> Result<()> {
        while n > 0 {
            let k = cacheless::conv::fit(n, buf.len());
            if !self.fill(&mut buf[..k], what)? {
                return Err(Error::Truncated { what, entry: self.name(), offset: self.pos });
            }
            n -= k as u64;
        }
        Ok(())
    }

    /// Reads whatever follows the end-of-archive blocks, so that a decompressor error there (a
    /// truncated or corrupt compressed stream whose tar part happens to be complete) is not
    /// missed, as `zstd -d | tar x` would not miss it either.
    pub fn drain(&mut self) -> Result<()> {
        let mut buf = [0u8; 64 * 1024];
        loop {
            match self.r.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => self.pos += n as u64,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.read_error(e)),
            }
        }
    }

    /// Reads the data of the current entry into `buf`; returns 0 at its end.
    pub fn read_data(&mut self, buf: &mut [u8]) -> Result<usize> {
        if self.remaining == 0 {
            return Ok(0);
        }
        let k = cacheless::conv::fit(self.remaining, buf.len());
        loop {
            match self.r.read(&mut buf[..k]) {
                Ok(0) => return Err(Error::Truncated { what: "data", entry: self.name(), offset: self.pos }),
                Ok(n) => {
                    self.pos += n as u64;
                    self.remaining -= n as u64;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.read_error(e)),
            }
        }
    }

    /// Fills `buf` entirely from the current entry's data.
    pub fn read_data_exact(&mut self, buf: &mut [u8]) -> Result<()> {
        let mut got = 0;
        while got < buf.len() {
            let n = self.read_data(&mut buf[got..])?;
            if n == 0 {
                return Err(Error::Truncated { what: "data", entry: self.name(), offset: self.pos });
            }
            got += n;
        }
        Ok(())
    }

    fn read_whole(&mut self, size: u64, max: u64, what: &'static str) -> Result<Vec<u8>> {
        if size > max {
            return Err(corrupt(format!("{what} of {size} bytes exceeds the limit of {max}"), &self.cur_name, self.pos));
        }
        let mut v = vec![0u8; cacheless::conv::usize_of(size)];
        if !self.fill(&mut v, what)? && size > 0 {
            return Err(Error::Truncated { what, entry: self.name(), offset: self.pos });
        }
        let pad = (BLOCK - size % BLOCK) % BLOCK;
        self.skip(pad, what)?;
        Ok(v)
    }

    /// Advances to the next member; `None` at the end of the archive.
    pub fn next_entry(&mut self) -> Result<Option<Entry>> {
        if self.ended {
            return Ok(None);
        }
        // Skip whatever the caller left of the previous entry.
        let rest = self.remaining + self.pad;
        self.remaining = 0;
        self.pad = 0;
        self.skip(rest, "data")?;

        let mut long_name: Option<Vec<u8>> = None;
        let mut long_link: Option<Vec<u8>> = None;
        let mut pax: Option<Pax> = None;
        let mut first_offset: Option<u64> = None;
        // Inside a run of blocks that are not headers, after a bad one (reported once).
        let mut skipping = false;
        loop {
            let off = self.pos;
            let mut block = [0u8; 512];
            if !self.fill(&mut block, "header")? {
                if off == 0 && !self.empty_ok {
                    // GNU tar: "This does not look like a tar archive".
                    return Err(corrupt("an empty input does not look like a tar archive", b"", 0));
                }
                if first_offset.is_some() {
                    return Err(Error::Truncated { what: "header", entry: self.name(), offset: off });
                }
                // EOF without end-of-archive blocks: GNU tar accepts it silently.
                self.ended = true;
                return Ok(None);
            }
            if block.iter().all(|&b| b == 0) {
                if first_offset.is_some() {
                    return Err(corrupt("end-of-archive block after an extended header", &self.cur_name, off));
                }
                if self.ignore_zeros {
                    continue;
                }
                // End of archive (GNU tar also stops at one zero block, after a warning).
                self.ended = true;
                return Ok(None);
            }
            first_offset.get_or_insert(off);
            let h = tar::Header::from_byte_slice(&block);
            match &long_name {
                Some(n) => self.set_name(n),
                None => self.set_name(&h.path_bytes()),
            }
            if let Err(bad) = self.verify_checksum(&block, off) {
                // GNU tar: reported once, then every block is looked at until one is a header;
                // what the extended headers before it said is for a member that is lost.
                if !skipping {
                    self.problems.push(corrupt_skipped(bad));
                }
                skipping = true;
                first_offset = None;
                long_name = None;
                long_link = None;
                pax = None;
                continue;
            }
            let old = h.as_old();
            let size = unsigned(&old.size, "size", &self.cur_name, off)?;
            if size > MAX_SIZE {
                return Err(corrupt(format!("size {size} overflows"), &self.cur_name, off));
            }
            let tf = old.linkflag[0];
            match tf {
                b'L' => {
                    long_name = Some(nul_trim(&self.read_whole(size, MAX_LONGNAME, "GNU long name")?).to_vec());
                    continue;
                }
                b'K' => {
                    long_link = Some(nul_trim(&self.read_whole(size, MAX_LONGNAME, "GNU long link")?).to_vec());
                    continue;
                }
                b'x' | b'X' => {
                    let data = self.read_whole(size, MAX_PAX, "pax header")?;
                    let mut p = pax.take().unwrap_or_else(|| self.global.clone());
                    self.apply_pax(&mut p, &data, off)?;
                    pax = Some(p);
                    continue;
                }
                b'g' => {
                    let data = self.read_whole(size, MAX_PAX, "pax global header")?;
                    let mut g = std::mem::take(&mut self.global);
                    self.apply_pax(&mut g, &data, off)?;
                    // Sparse and per-file keys make no sense globally.
                    g.sparse_map.clear();
                    self.global = g;
                    continue;
                }
                b'V' => {
                    // Volume label: nothing to extract.
                    self.skip(size + (BLOCK - size % BLOCK) % BLOCK, "data")?;
                    first_offset = None;
                    long_name = None;
                    long_link = None;
                    pax = None;
                    continue;
                }
                b'M' => return Err(corrupt("GNU multi-volume continuation entries are not supported", &self.cur_name, off)),
                _ => {}
            }
            let pax = pax.unwrap_or_else(|| self.global.clone());
            return self.build_entry(h, &block, off, first_offset.unwrap_or(off), size, long_name, long_link, pax).map(Some);
        }
    }

    fn verify_checksum(&self, block: &[u8; 512], off: u64) -> Result<()> {
        let stored = parse_numeric(&block[148..156]).map_err(|e| corrupt(format!("checksum field: {e}"), &self.cur_name, off))?;
        let (u, s) = header_sums(block);
        if stored != u && stored != s {
            return Err(corrupt(format!("header checksum mismatch (stored {stored}, computed {u})"), &self.cur_name, off));
        }
        Ok(())
    }

    /// Applies a pax header's records to `p`. A record that is not framed, or a value that
    /// makes no sense for its key, is reported (GNU tar: "Malformed extended header") and
    /// ignored; the header's own field stands. Only a sparse map that makes no sense stops the
    /// run: where the member's data lies is then unknown.
    fn apply_pax(&mut self, p: &mut Pax, data: &[u8], off: u64) -> Result<()> {
        for rec in pax_records(data) {
            let (key, val) = match rec {
                Ok(kv) => kv,
                Err(why) => {
                    self.problems.push(corrupt(why, &self.cur_name, off));
                    break;
                }
            };
            let num = |what: &str| -> Result<u64> {
                std::str::from_utf8(val)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or_else(|| corrupt(format!("bad pax {what} {:?}", String::from_utf8_lossy(val)), &self.cur_name, off))
            };
            // A bad value of a key that does not place the data: reported, the key ignored.
            let mut soft = |r: Result<u64>| match r {
                Ok(v) => Some(v),
                Err(e) => {
                    self.problems.push(malformed(e, key, val));
                    None
                }
            };
            match key {
                b"path" => p.path = Some(val.to_vec()),
                b"uname" => p.uname = Some(val.to_vec()),
                b"gname" => p.gname = Some(val.to_vec()),
                b"linkpath" => p.linkpath = Some(val.to_vec()),
                b"SCHILY.acl.access" => p.acl_access = Some(val.to_vec()),
                b"SCHILY.acl.default" => p.acl_default = Some(val.to_vec()),
                _ if key.starts_with(b"SCHILY.xattr.") => {
                    let name = xattr_key_decode(&key[b"SCHILY.xattr.".len()..]);
                    p.xattrs.retain(|(n, _)| *n != name);
                    p.xattrs.push((name, val.to_vec()));
                }
                b"size" => {
                    let v = num("size").and_then(|v| if v > MAX_SIZE { Err(corrupt(format!("pax size {v} overflows"), &self.cur_name, off)) } else { Ok(v) });
                    if let Some(v) = soft(v) {
                        p.size = Some(v);
                    }
                }
                b"uid" => {
                    if let Some(v) = soft(num("uid")) {
                        p.uid = Some(v);
                    }
                }
                b"gid" => {
                    if let Some(v) = soft(num("gid")) {
                        p.gid = Some(v);
                    }
                }
                b"mtime" => match std::str::from_utf8(val).ok().and_then(parse_pax_time) {
                    Some(t) => p.mtime = Some(t),
                    None => {
                        let e = corrupt(format!("bad pax mtime {:?}", String::from_utf8_lossy(val)), &self.cur_name, off);
                        self.problems.push(malformed(e, key, val));
                    }
                },
                b"GNU.sparse.major" => p.sparse_major = Some(num("GNU.sparse.major")?),
                b"GNU.sparse.minor" => p.sparse_minor = Some(num("GNU.sparse.minor")?),
                b"GNU.sparse.name" => p.sparse_name = Some(val.to_vec()),
                b"GNU.sparse.realsize" | b"GNU.sparse.size" => p.sparse_realsize = Some(num("GNU.sparse.realsize")?),
                b"GNU.sparse.numblocks" => {
                    // Format 0.0/0.1 marker.
                    p.sparse_major.get_or_insert(0);
                }
                // Format 0.0: offset/numbytes pairs, in order, repeated.
                b"GNU.sparse.offset" => p.sparse_offset_pending = Some(num("GNU.sparse.offset")?),
                b"GNU.sparse.numbytes" => {
                    let n = num("GNU.sparse.numbytes")?;
                    let o = p.sparse_offset_pending.take().ok_or_else(|| corrupt("GNU.sparse.numbytes without offset", &self.cur_name, off))?;
                    p.sparse_map.push(o);
                    p.sparse_map.push(n);
                    p.sparse_major.get_or_insert(0);
                }
                // Format 0.1: "offset,size,offset,size,...".
                b"GNU.sparse.map" => {
                    let s = std::str::from_utf8(val).unwrap_or("");
                    p.sparse_map.clear();
                    if !s.is_empty() {
                        for part in s.split(',') {
                            p.sparse_map.push(part.parse().map_err(|_| corrupt("bad GNU.sparse.map", &self.cur_name, off))?);
                        }
                    }
                    p.sparse_major.get_or_insert(0);
                    p.sparse_minor.get_or_insert(1);
                }
                // Known to GNU tar and of no use here: taken silently.
                b"atime" | b"ctime" | b"comment" | b"charset" | b"GNU.dumpdir" | b"RHT.security.selinux" => {}
                _ if key.starts_with(b"SCHILY.") || key.starts_with(b"GNU.sparse.") || key.starts_with(b"GNU.volume.") => {}
                // GNU tar says so and goes on.
                _ => self.warnings.push(format!("Ignoring unknown extended header keyword '{}'", String::from_utf8_lossy(key))),
            }
            if p.sparse_map.len() / 2 > MAX_SPARSE_SEGMENTS {
                return Err(corrupt("too many sparse segments", &self.cur_name, off));
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn build_entry(
        &mut self,
        h: &tar::Header,
        block: &[u8; 512],
        off: u64,
        first_off: u64,
        size: u64,
        long_name: Option<Vec<u8>>,
        long_link: Option<Vec<u8>>,
        mut pax: Pax,
    ) -> Result<Entry> {
        let old = h.as_old();
        let path = match (pax.path.take(), long_name) {
            (Some(p), _) | (None, Some(p)) => p,
            (None, None) => h.path_bytes().into_owned(),
        };
        let mut link = long_link.or_else(|| h.link_name_bytes().map(|c| c.into_owned()));
        if let Some(l) = &pax.linkpath {
            link = Some(l.clone());
        }
        self.set_name(&path);
        let name = &self.cur_name;
        let mode = unsigned(&old.mode, "mode", name, off)?;
        let mode = (mode & 0o7777) as u32;
        let uid = match pax.uid {
            Some(u) => u,
            None => unsigned(&old.uid, "uid", name, off)?,
        };
        let gid = match pax.gid {
            Some(g) => g,
            None => unsigned(&old.gid, "gid", name, off)?,
        };
        let mtime = match pax.mtime {
            Some(t) => t,
            None => (parse_numeric(&old.mtime).map_err(|e| corrupt(format!("mtime: {e}"), name, off))?, 0),
        };
        let data_len = pax.size.unwrap_or(size);
        let tf = old.linkflag[0];
        let mut kind = match tf {
            b'0' | 0 | b'7' | b'S' => Kind::File,
            b'1' => Kind::HardLink,
            b'2' => Kind::Symlink,
            b'3' => Kind::CharDev,
            b'4' => Kind::BlockDev,
            b'5' | b'D' => Kind::Dir,
            b'6' => Kind::Fifo,
            // POSIX: unknown types are extracted as regular files.
            _ => Kind::File,
        };
        if tf == 0 && path.ends_with(b"/") {
            kind = Kind::Dir;
        }
        let mut dev = (0, 0);
        if matches!(kind, Kind::CharDev | Kind::BlockDev) {
            // Where ustar and GNU headers both keep them (a v7 header has none).
            let fields = h.as_ustar().map(|u| (&u.dev_major, &u.dev_minor)).or_else(|| h.as_gnu().map(|g| (&g.dev_major, &g.dev_minor)));
            if let Some((major, minor)) = fields {
                let num = |f: &[u8], what: &str| {
                    unsigned(f, what, name, off).and_then(|v| u32::try_from(v).map_err(|_| corrupt(format!("{what} {v} out of range"), name, off)))
                };
                dev = (num(major, "devmajor")?, num(minor, "devminor")?);
            }
        }
        let uname = pax.uname.take().unwrap_or_else(|| h.username_bytes().map(<[u8]>::to_vec).unwrap_or_default());
        let gname = pax.gname.take().unwrap_or_else(|| h.groupname_bytes().map(<[u8]>::to_vec).unwrap_or_default());
        let mut e = Entry {
            path,
            uname,
            gname,
            link: if matches!(kind, Kind::HardLink | Kind::Symlink) { link } else { None },
            kind,
            mode,
            uid,
            gid,
            mtime,
            size: data_len,
            data_len,
            sparse: None,
            dev,
            offset: first_off,
            xattrs: std::mem::take(&mut pax.xattrs),
            acl_access: pax.acl_access.take(),
            acl_default: pax.acl_default.take(),
        };
        self.remaining = data_len;
        self.pad = (BLOCK - data_len % BLOCK) % BLOCK;

        if tf == b'S' || (kind == Kind::File && pax.sparse_major.is_some()) {
            // Reading the map borrows the parser: the name its errors carry is copied (the
            // member's name before a pax sparse name replaces it).
            let name = self.cur_name.clone();
            self.sparse_map(&mut e, h, &pax, &name, off)?;
        }
        let _ = block;
        Ok(e)
    }

    /// Reads and checks the sparse map of `e` (GNU old sparse when its type is 'S', else pax
    /// 0.0, 0.1 or 1.0). `name` is the member's name for errors about the map.
    fn sparse_map(&mut self, e: &mut Entry, h: &tar::Header, pax: &Pax, name: &[u8], off: u64) -> Result<()> {
        if h.as_old().linkflag[0] == b'S' {
            // GNU old sparse: 4 descriptors in the header, more in extension blocks.
            let g = h.as_gnu().ok_or_else(|| corrupt("sparse entry without GNU magic", name, off))?;
            let mut map = Vec::new();
            let push = |o: &[u8], n: &[u8], map: &mut Vec<(u64, u64)>| -> Result<bool> {
                if o.iter().all(|&b| b == 0) && n.iter().all(|&b| b == 0) {
                    return Ok(false);
                }
                map.push((unsigned(o, "sparse offset", name, off)?, unsigned(n, "sparse length", name, off)?));
                Ok(true)
            };
            for s in &g.sparse {
                push(&s.offset, &s.numbytes, &mut map)?;
            }
            let mut ext = g.isextended[0] != 0;
            e.size = unsigned(&g.realsize, "sparse real size", name, off)?;
            // Extension blocks come before the data and are not part of `size`.
            while ext {
                let mut b = [0u8; 512];
                if !self.fill(&mut b, "header")? {
                    return Err(Error::Truncated { what: "header", entry: lossy(name), offset: self.pos });
                }
                for i in 0..21 {
                    push(&b[i * 24..i * 24 + 12], &b[i * 24 + 12..i * 24 + 24], &mut map)?;
                }
                ext = b[504] != 0;
                if map.len() > MAX_SPARSE_SEGMENTS {
                    return Err(corrupt("too many sparse segments", name, off));
                }
            }
            e.sparse = Some(map);
        } else {
            if let Some(n) = &pax.sparse_name {
                e.path = n.clone();
                self.set_name(n);
            }
            e.size = pax.sparse_realsize.ok_or_else(|| corrupt("pax sparse entry without real size", name, off))?;
            if pax.sparse_major == Some(1) {
                // Format 1.0: the map is at the start of the data, decimal lines, padded to 512.
                let map = self.read_sparse_1_0(name)?;
                e.sparse = Some(map);
            } else {
                let m = &pax.sparse_map;
                if m.len() % 2 != 0 {
                    return Err(corrupt("odd GNU.sparse.map", name, off));
                }
                e.sparse = Some(m.chunks(2).map(|c| (c[0], c[1])).collect());
            }
        }
        if let Some(map) = &e.sparse {
            let mut total: u64 = 0;
            for &(o, n) in map {
                let end = o.checked_add(n).ok_or_else(|| corrupt("sparse segment overflows", name, off))?;
                if end > e.size || end > MAX_SIZE {
                    return Err(corrupt("sparse segment beyond the real size", name, off));
                }
                total = total.checked_add(n).ok_or_else(|| corrupt("sparse map overflows", name, off))?;
            }
            if total > self.remaining {
                return Err(corrupt(format!("sparse map wants {total} bytes, entry holds {}", self.remaining), name, off));
            }
        }
        Ok(())
    }

    fn read_sparse_1_0(&mut self, name: &[u8]) -> Result<Vec<(u64, u64)>> {
        let start = self.remaining;
        let line = |p: &mut Self| -> Result<u64> {
            let mut s = Vec::new();
            loop {
                let mut b = [0u8; 1];
                p.read_data_exact(&mut b)?;
                if b[0] == b'\n' {
                    break;
                }
                if s.len() > 20 {
                    return Err(corrupt("bad sparse 1.0 map", name, p.pos));
                }
                s.push(b[0]);
            }
            std::str::from_utf8(&s).ok().and_then(|s| s.parse().ok()).ok_or_else(|| corrupt("bad sparse 1.0 map", name, p.pos))
        };
        let n = cacheless::conv::usize_of(line(self)?);
        if n > MAX_SPARSE_SEGMENTS {
            return Err(corrupt("too many sparse segments", name, self.pos));
        }
        let mut map = Vec::with_capacity(n);
        for _ in 0..n {
            let o = line(self)?;
            let l = line(self)?;
            map.push((o, l));
        }
        let used = start - self.remaining;
        let pad = (BLOCK - used % BLOCK) % BLOCK;
        let mut skip = vec![0u8; pad as usize];
        self.read_data_exact(&mut skip)?;
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_fields() {
        assert_eq!(parse_numeric(b"0000644\0"), Ok(0o644));
        assert_eq!(parse_numeric(b"  644 \0"), Ok(0o644));
        assert_eq!(parse_numeric(b"\0\0\0\0"), Ok(0));
        assert_eq!(parse_numeric(b"        "), Ok(0));
        assert!(parse_numeric(b"0009\0").is_err());
        // Base-256: 8 GiB, -1, overflow.
        let mut f = [0u8; 12];
        f[0] = 0x80;
        f[7] = 2;
        assert_eq!(parse_numeric(&f), Ok(2 << 32));
        assert_eq!(parse_numeric(&[0xff; 12]), Ok(-1));
        let mut f = [0xffu8; 12];
        f[0] = 0x80;
        assert!(parse_numeric(&f).is_err());
        assert!(parse_numeric(b"7777777777777777777777777").is_err());
    }

    #[test]
    fn header_sums_are_the_bytewise_sums() {
        let mut x: u32 = 12345;
        for round in 0..200 {
            let mut block = [0u8; 512];
            for b in block.iter_mut() {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                *b = x.to_le_bytes()[2];
            }
            if round == 0 {
                block = [0xff; 512];
            }
            let (mut u, mut s) = (0i64, 0i64);
            for (i, &b) in block.iter().enumerate() {
                let b = if (148..156).contains(&i) { b' ' } else { b };
                u += i64::from(b);
                s += i64::from(i8::from_ne_bytes([b]));
            }
            assert_eq!(header_sums(&block), (u, s));
        }
    }

    #[test]
    fn pax_times() {
        assert_eq!(parse_pax_time("1600000000.5"), Some((1600000000, 500_000_000)));
        assert_eq!(parse_pax_time("1600000000.123456789123"), Some((1600000000, 123_456_789)));
        assert_eq!(parse_pax_time("-1.5"), Some((-2, 500_000_000)));
        assert_eq!(parse_pax_time("12"), Some((12, 0)));
        assert_eq!(parse_pax_time("x"), None);
        assert_eq!(parse_pax_time("1e-09"), Some((0, 1)));
        assert_eq!(parse_pax_time("1.5e3"), Some((1500, 0)));
        assert_eq!(parse_pax_time("1600000000"), Some((1600000000, 0)));
        assert_eq!(parse_pax_time(".25"), Some((0, 250_000_000)));
        assert_eq!(parse_pax_time("-0.5"), Some((-1, 500_000_000)));
        for bad in ["", ".", "-", "1e", "1.2.3", "1e99", "+1", "1 "] {
            assert_eq!(parse_pax_time(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn pax_records_are_split_by_their_length_whatever_bytes_values_hold() {
        let data = b"19 path=new\nline\0x\n20 uid=1\n" as &[u8];
        // "19 path=new\nline\0x\n" is 19 bytes; "20 uid=1\n" is not 20.
        let got: Vec<_> = pax_records(data).collect();
        assert_eq!(got[0], Ok((&b"path"[..], &b"new\nline\0x"[..])));
        assert!(got[1].is_err(), "{got:?}");
        assert_eq!(got.len(), 2);
        let ok: Vec<_> = pax_records(b"8 uid=1\n\0\0\0").collect();
        assert_eq!(ok, vec![Ok((&b"uid"[..], &b"1"[..]))]);
    }

    #[test]
    fn end_of_archive_variants() {
        // One zero block, two zero blocks: a clean end; no byte at all is no archive.
        for n in [512usize, 1024, 10240] {
            let v = vec![0u8; n];
            let mut p = Parser::new(&v[..]);
            assert!(p.next_entry().unwrap().is_none());
        }
        let mut p = Parser::new(&[][..]);
        assert!(matches!(p.next_entry(), Err(Error::Corrupt { .. })));
    }
}
