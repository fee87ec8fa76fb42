//! The copy job with URL operands as a library, against the real servers the test command
//! starts: the per-file decisions GNU's options drive (`-u` by the ETag a file landed with).
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use cacheless::{Budget, IoOptions, Progress};
use cacheless_cp::{copy, CpOptions};
use cacheless_remote::{landed_etag, upload_file, Credentials, Location, Remote, RemoteOptions, ETAG_XATTR};
use cacheless_testkit::servers::{self, S3};

const MIB: usize = 1 << 20;

fn data(len: usize, seed: u64) -> Vec<u8> {
    cacheless_testkit::random_bytes(len, seed)
}

/// A key prefix no other test uses.
fn prefix(test: &str) -> String {
    format!("cp-{test}-{}/", std::process::id())
}

/// The settings that reach `s3`: its endpoint, region and keys.
fn s3_options(s3: &S3) -> RemoteOptions {
    let credentials = Some(Credentials { key_id: s3.key.clone(), secret: s3.secret.clone(), token: None });
    RemoteOptions { endpoint: Some(s3.endpoint.clone()), region: Some("us-east-1".into()), credentials, ..RemoteOptions::default() }
}

fn io() -> IoOptions {
    IoOptions::new(Budget::new(64 * MIB))
}

#[test]
fn update_compares_the_etag_a_file_landed_with_and_falls_back_to_size_and_time() {
    let Some(s3) = servers::s3() else { return };
    let pre = prefix("update");
    let remote = Remote::connect(&Location::parse(&s3.url("")).unwrap(), &RemoteOptions { part_size: MIB, ..s3_options(&s3) }).unwrap();
    let no = AtomicBool::new(false);
    let d = cacheless_testkit::scratch();
    let (first, second) = (data(MIB + 3, 21), data(MIB + 3, 22));
    let src = d.path().join("src");
    let url = s3.url(&format!("{pre}obj"));
    let loc = Location::parse(&url).unwrap();
    let put = |body: &[u8]| {
        std::fs::write(&src, body).unwrap();
        upload_file(&remote, &src, &loc, &io(), false, &no, None).unwrap();
    };
    let dst = d.path().join("dst");
    let mut o = CpOptions::new(io());
    o.remote = RemoteOptions { part_size: MIB, ..s3_options(&s3) };
    o.update = true;
    let fetched = |o: &CpOptions| {
        let r = copy(&[std::path::PathBuf::from(&url)], &dst, o, &Arc::new(Progress::new())).unwrap();
        assert_eq!(r.errors, 0, "{:?}", r.first_error);
        !r.transfers[0].skipped
    };
    put(&first);
    assert!(fetched(&o), "nothing there yet");
    let etag = remote.head(&loc).unwrap().etag.unwrap();
    assert_eq!(landed_etag(&dst).as_deref(), Some(etag.as_str()));
    // Same ETag: skipped, though the file's time is older than the object's.
    let f = std::fs::File::options().write(true).open(&dst).unwrap();
    f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000)).unwrap();
    assert!(!fetched(&o), "the same version");
    // Another version of the same size: fetched, though the file's time is newer.
    put(&second);
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(3_600)).unwrap();
    assert!(fetched(&o), "a new version");
    assert_eq!(std::fs::read(&dst).unwrap(), second);
    // Without the attribute (another tool's download): GNU's rule, the time alone; a file not
    // older than the object is left, whatever its size.
    let f = std::fs::File::options().write(true).open(&dst).unwrap();
    cacheless::sys::xattr_remove(cacheless::sys::XattrAt::Fd(std::os::fd::AsFd::as_fd(&f)), ETAG_XATTR).unwrap();
    assert!(!fetched(&o), "the object's time");
    f.set_len(5).unwrap();
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(3_600)).unwrap();
    assert!(!fetched(&o), "newer than the object, another size");
    assert_eq!(std::fs::metadata(&dst).unwrap().len(), 5);
    f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000)).unwrap();
    assert!(fetched(&o), "older than the object");
    assert_eq!(std::fs::read(&dst).unwrap(), second);
}
