//! The writer: every member the dispatcher hands over, in archive order, into the tar stream
//! (its header, then its data as its reader hands it on), counted into the report.

use std::sync::mpsc::Receiver;

use cacheless::Progress;

use super::frames::{self, TarOut};
use super::header;
use super::read::Msg;
use super::walk::{show, Item};
use super::{PackReport, Slot};
use crate::modes::ModeCounter;

/// Tar record size: the archive is padded to a multiple of it, as GNU tar does (20 blocks).
const RECORD: u64 = 10240;

/// The report as the writer fills it in, and the files read per mode.
pub(super) struct Counts {
    pub report: PackReport,
    read_modes: ModeCounter,
}

impl Counts {
    pub(super) fn new(report: PackReport) -> Counts {
        Counts { report, read_modes: ModeCounter::default() }
    }
    /// The report, with the files read per mode.
    pub(super) fn into_report(self) -> PackReport {
        let mut report = self.report;
        report.read_modes = self.read_modes.counts();
        report
    }
    fn fail(&mut self, progress: &Progress, msg: String, errno: Option<i32>) {
        progress.error();
        if self.report.failure_count == 0 {
            self.report.first_failure_errno = errno;
        }
        self.report.failure_count += 1;
        if self.report.failures.len() < 1000 {
            self.report.failures.push(msg);
        }
    }
    pub(super) fn warn(&mut self, msg: String) {
        if self.report.warnings.len() < 1000 {
            self.report.warnings.push(msg);
        }
    }
}

/// Why the writer stopped early.
pub(super) enum Stop {
    Cancelled,
    /// The output thread went away; it says why.
    Closed,
}

impl From<frames::Closed> for Stop {
    fn from(_: frames::Closed) -> Stop {
        Stop::Closed
    }
}

static ZEROS: [u8; 64 << 10] = [0u8; 64 << 10];

fn zeros(tar: &mut TarOut, mut n: u64) -> Result<(), Stop> {
    while n > 0 {
        let k = cacheless::conv::fit(n, ZEROS.len());
        tar.write(&ZEROS[..k])?;
        n -= k as u64;
    }
    Ok(())
}

/// Writes every member the dispatcher hands over, in order, then the end of the archive.
pub(super) fn write_members(slots: &Receiver<Slot>, tar: &mut TarOut, counts: &mut Counts, progress: &Progress) -> Result<(), Stop> {
    let mut hdr = Vec::with_capacity(4096);
    for slot in slots.iter() {
        if progress.is_cancelled() {
            return Err(Stop::Cancelled);
        }
        let r = &mut counts.report;
        match slot {
            Slot::Warn(m) => counts.warn(m),
            Slot::Error(m, errno) => counts.fail(progress, m, errno),
            Slot::Plain(item) => {
                hdr.clear();
                header::append(&mut hdr, &item.name, &item.fields, None);
                tar.write(&hdr)?;
                r.entries += 1;
                match item.fields.kind {
                    header::Kind::Dir => r.dirs += 1,
                    header::Kind::Symlink => r.symlinks += 1,
                    header::Kind::HardLink => r.hardlinks += 1,
                    header::Kind::File => r.files += 1,
                    _ => r.special += 1,
                }
            }
            Slot::Data(item, rx) => write_file(&item, &rx, tar, &mut hdr, counts, progress)?,
        }
    }
    // End of archive: two zero blocks, then padding to a whole record.
    zeros(tar, 1024)?;
    zeros(tar, (RECORD - tar.tar_bytes % RECORD) % RECORD)?;
    Ok(())
}

/// Writes one file with data: its header once the reader has it open, then its data as it
/// arrives, padded with zeros if the file shrank or a read failed (the header promised the size).
fn write_file(item: &Item, rx: &Receiver<Msg>, tar: &mut TarOut, hdr: &mut Vec<u8>, counts: &mut Counts, progress: &Progress) -> Result<(), Stop> {
    let name = show(&item.name);
    let sparse = match rx.recv() {
        Ok(Msg::Start { mode, sparse }) => {
            counts.read_modes.add(mode);
            sparse
        }
        Ok(Msg::Failed { msg, errno, .. }) => {
            counts.fail(progress, format!("{name}: {msg}; not dumped"), errno);
            return Ok(());
        }
        _ => {
            counts.fail(progress, format!("{name}: read failed; not dumped"), None);
            return Ok(());
        }
    };
    hdr.clear();
    header::append(hdr, &item.name, &item.fields, sparse.as_ref());
    tar.write(hdr)?;
    let want = sparse.as_ref().map_or(item.fields.size, |m| m.data_len());
    let mut got = 0u64;
    loop {
        match rx.recv() {
            Ok(Msg::Data(p)) => {
                let n = cacheless::conv::fit(want - got, p.len());
                tar.write(&p[..n])?;
                drop(p);
                got += n as u64;
                progress.add_bytes(n as u64);
                if progress.is_cancelled() {
                    return Err(Stop::Cancelled);
                }
            }
            Ok(Msg::End { changed, .. }) => {
                if let Some(c) = changed {
                    counts.report.changed += 1;
                    counts.fail(progress, format!("{name}: {c}"), None);
                }
                break;
            }
            Ok(Msg::Failed { msg, errno, .. }) => {
                counts.fail(progress, format!("{name}: {msg}; padded with zeros"), errno);
                break;
            }
            Ok(Msg::Start { .. }) | Err(_) => {
                if progress.is_cancelled() {
                    return Err(Stop::Cancelled);
                }
                counts.fail(progress, format!("{name}: read ended early; padded with zeros"), None);
                break;
            }
        }
    }
    zeros(tar, want - got)?;
    zeros(tar, (512 - want % 512) % 512)?;
    let r = &mut counts.report;
    r.entries += 1;
    r.files += 1;
    r.input_bytes += got;
    if sparse.is_some() {
        r.sparse += 1;
    }
    progress.file_done();
    Ok(())
}
