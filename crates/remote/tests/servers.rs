//! Downloads and uploads against the real servers the test command starts (SeaweedFS for S3,
//! nginx for HTTP): byte-exact round trips at the sizes where chunking has edges, landed files
//! not resident, and failures that name the URL and leave nothing under a final name or key.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cacheless::{Budget, ErrorKind, IoOptions, WriteOptions};
use cacheless_remote::{download_file, read_all, upload_file, verify_download, Credentials, Location, Remote, RemoteOptions};
use cacheless_testkit::servers::{self, S3};

const MIB: usize = 1 << 20;

fn data(len: usize, seed: u64) -> Vec<u8> {
    cacheless_testkit::random_bytes(len, seed)
}

/// A key prefix no other test uses.
fn prefix(test: &str) -> String {
    format!("{test}-{}/", std::process::id())
}

/// The settings that reach `s3`: its endpoint, region and keys.
fn s3_options(s3: &S3) -> RemoteOptions {
    let credentials = Some(Credentials { key_id: s3.key.clone(), secret: s3.secret.clone(), token: None });
    RemoteOptions { endpoint: Some(s3.endpoint.clone()), region: Some("us-east-1".into()), credentials, ..RemoteOptions::default() }
}

fn client(s3: &S3, part: usize) -> Remote {
    let opts = RemoteOptions { part_size: part, ..s3_options(s3) };
    Remote::connect(&Location::parse(&s3.url("")).unwrap(), &opts).unwrap()
}

fn io() -> IoOptions {
    IoOptions::new(Budget::new(64 * MIB))
}

fn resident(p: &Path) -> u64 {
    cacheless::residency::residency_of(p).unwrap().cached_bytes()
}

#[test]
fn s3_round_trips_are_byte_exact_at_every_chunk_edge() {
    let Some(s3) = servers::s3() else { return };
    let pre = prefix("edges");
    // Downloads in 1 MiB ranges; uploads in 5 MiB parts (S3's smallest).
    let remote = client(&s3, MIB);
    let no = AtomicBool::new(false);
    let d = cacheless_testkit::scratch();
    for (i, len) in [0, 1, 4096, MIB - 1, MIB, MIB + 1, 5 * MIB + 1, 11 * MIB + 3].into_iter().enumerate() {
        let body = data(len, i as u64);
        let src = d.path().join(format!("src{i}"));
        std::fs::write(&src, &body).unwrap();
        let loc = Location::parse(&s3.url(&format!("{pre}obj{i}"))).unwrap();
        // Verified: the server's ETag is the one these bytes in these parts make.
        let up = upload_file(&remote, &src, &loc, &io(), true, &no, None).unwrap();
        assert_eq!(up.bytes, len as u64);
        assert_eq!(up.parts > 0, len > 5 * MIB, "{len} B: {} parts", up.parts);
        let v = up.verified.unwrap();
        assert_eq!(v.expected, v.server);
        let info = remote.head(&loc).unwrap();
        assert_eq!(info.size, len as u64);
        let dst = d.path().join(format!("dst{i}"));
        let got = download_file(&remote, &info, &dst, &WriteOptions::from(io()), &no, None).unwrap();
        assert_eq!(resident(&dst), 0, "{len} B landed with nothing cached");
        // A single PUT's ETag is its MD5: the landed file is checked against it.
        let checked = verify_download(&dst, &info, &io()).unwrap();
        assert_eq!(checked.is_some(), up.parts == 0, "{len} B");
        assert_eq!(resident(&dst), 0, "{len} B read back with nothing cached");
        assert_eq!(std::fs::read(&dst).unwrap(), body, "{len} B");
        assert_eq!(got.fetch.ranges, len.div_ceil(MIB) as u64, "{len} B");
        // The object's time is the file's.
        assert_eq!(std::fs::metadata(&dst).unwrap().modified().unwrap(), info.last_modified);
        assert_eq!(read_all(&remote, &info, &no).unwrap(), body);
    }
    assert!(s3.open_uploads(&pre).is_empty());
}

#[test]
fn a_download_s_memory_is_its_budget_whatever_the_object_s_size() {
    let Some(s3) = servers::s3() else { return };
    let pre = prefix("budget");
    let remote = client(&s3, MIB);
    let no = AtomicBool::new(false);
    let d = cacheless_testkit::scratch();
    let body = data(24 * MIB + 7, 9);
    let src = d.path().join("src");
    std::fs::write(&src, &body).unwrap();
    let loc = Location::parse(&s3.url(&format!("{pre}big"))).unwrap();
    upload_file(&remote, &src, &loc, &io(), false, &no, None).unwrap();
    let info = remote.head(&loc).unwrap();
    // A budget of 3 ranges: the download runs with what fits.
    let budget = Budget::new(3 * MIB);
    let wo = WriteOptions::from(IoOptions::new(budget.clone()));
    let dst = d.path().join("dst");
    let got = download_file(&remote, &info, &dst, &wo, &no, None).unwrap();
    assert_eq!(std::fs::read(&dst).unwrap(), body);
    assert!(got.fetch.in_flight <= 3, "{} in flight", got.fetch.in_flight);
    assert_eq!(budget.used(), 0, "every buffer came back");
}

/// A part size larger than the memory budget (`--memory 16M --part-size 64M`) is clamped to
/// it: every range in flight and every part fits the budget, both ways; an upload whose
/// smallest possible part (S3's 5 MiB) does not fit is refused before anything is sent.
#[test]
fn a_part_size_past_the_budget_is_clamped_to_it_or_refused() {
    let Some(s3) = servers::s3() else { return };
    let pre = prefix("clamp");
    let remote = client(&s3, 64 * MIB);
    let no = AtomicBool::new(false);
    let d = cacheless_testkit::scratch();
    let body = data(40 * MIB + 3, 31);
    let src = d.path().join("src");
    std::fs::write(&src, &body).unwrap();
    let loc = Location::parse(&s3.url(&format!("{pre}big"))).unwrap();
    let budget = Budget::new(16 * MIB);
    let up = upload_file(&remote, &src, &loc, &IoOptions::new(budget.clone()), false, &no, None).unwrap();
    assert!(up.part <= 16 * MIB && up.parts >= 3, "parts of {} B, {} of them", up.part, up.parts);
    let info = remote.head(&loc).unwrap();
    let dst = d.path().join("dst");
    let got = download_file(&remote, &info, &dst, &WriteOptions::from(IoOptions::new(budget.clone())), &no, None).unwrap();
    assert!(got.fetch.range * got.fetch.in_flight <= 16 * MIB, "{} B ranges, {} in flight", got.fetch.range, got.fetch.in_flight);
    assert_eq!(std::fs::read(&dst).unwrap(), body);
    assert_eq!(budget.used(), 0, "every buffer came back");
    // 4 MiB cannot hold S3's smallest part: refused, nothing sent.
    let small = loc.with_key(format!("{pre}refused"));
    let e = upload_file(&remote, &src, &small, &IoOptions::new(Budget::new(4 * MIB)), false, &no, None).unwrap_err();
    assert!(e.to_string().contains("does not fit in the memory budget"), "{e}");
    assert_eq!(remote.head(&small).unwrap_err().kind(), ErrorKind::NotFound);
    assert!(s3.open_uploads(&pre).is_empty());
}

#[test]
fn s3_failures_name_the_url_and_leave_nothing() {
    let Some(s3) = servers::s3() else { return };
    let pre = prefix("fail");
    let remote = client(&s3, MIB);
    let no = AtomicBool::new(false);
    let d = cacheless_testkit::scratch();
    // A missing key.
    let missing = Location::parse(&s3.url(&format!("{pre}nothing"))).unwrap();
    let e = remote.head(&missing).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert!(e.to_string().contains(&missing.to_string()), "{e}");
    // A missing bucket.
    let nob = Location::parse("s3://no-such-bucket-cacheless/x").unwrap();
    let r = Remote::connect(&nob, &s3_options(&s3)).unwrap();
    let e = r.head(&nob).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    // Wrong credentials.
    let wrong = Some(Credentials { key_id: s3.key.clone(), secret: "not-the-secret".into(), token: None });
    let r = Remote::connect(&missing, &RemoteOptions { credentials: wrong, ..s3_options(&s3) }).unwrap();
    let e = r.head(&missing).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    assert!(e.note().unwrap_or_default().contains("AWS_SECRET_ACCESS_KEY"), "{e:?}");
    // An upload with wrong credentials leaves no object.
    let src = d.path().join("src");
    std::fs::write(&src, data(6 * MIB, 1)).unwrap();
    let dest = missing.with_key(format!("{pre}denied"));
    assert!(upload_file(&r, &src, &dest, &io(), false, &no, None).is_err());
    assert_eq!(remote.head(&dest).unwrap_err().kind(), ErrorKind::NotFound);
    // A server that is down: a closed port.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let down = Some(format!("http://127.0.0.1:{closed}"));
    let r = Remote::connect(&missing, &RemoteOptions { endpoint: down, retries: 1, ..s3_options(&s3) }).unwrap();
    let e = r.head(&missing).unwrap_err();
    assert!(e.to_string().contains("cannot reach the server"), "{e}");
    assert!(e.note().unwrap_or_default().contains("AWS_ENDPOINT_URL"), "{e:?}");
    assert_eq!(cacheless_testkit::names(d.path()), ["src"]);
}

#[test]
fn an_interrupted_upload_is_aborted_and_an_interrupted_download_removed() {
    let Some(s3) = servers::s3() else { return };
    let pre = prefix("cancel");
    let remote = client(&s3, 5 * MIB);
    let d = cacheless_testkit::scratch();
    let src = d.path().join("src");
    std::fs::write(&src, data(40 * MIB, 2)).unwrap();
    let loc = Location::parse(&s3.url(&format!("{pre}obj"))).unwrap();
    // Cancelled once the first parts are on their way.
    let cancel = Arc::new(AtomicBool::new(false));
    let progress = cacheless::Progress::new();
    let flag = cancel.clone();
    let e = std::thread::scope(|s| {
        s.spawn(|| {
            while progress.bytes() < 10 * MIB as u64 {
                std::thread::yield_now();
            }
            flag.store(true, Ordering::Relaxed);
        });
        let r = upload_file(&remote, &src, &loc, &io(), false, &cancel, Some(&progress));
        flag.store(true, Ordering::Relaxed);
        r
    })
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Interrupted, "{e}");
    assert_eq!(remote.head(&loc).unwrap_err().kind(), ErrorKind::NotFound);
    assert!(s3.open_uploads(&pre).is_empty(), "{:?}", s3.open_uploads(&pre));
    // A download cancelled mid-way leaves no file and no temporary.
    let no = AtomicBool::new(false);
    upload_file(&remote, &src, &loc, &io(), false, &no, None).unwrap();
    let info = remote.head(&loc).unwrap();
    let cancel = AtomicBool::new(false);
    let progress = cacheless::Progress::new();
    let small = client(&s3, MIB);
    let e = std::thread::scope(|s| {
        s.spawn(|| {
            while progress.bytes() < 4 * MIB as u64 && !cancel.load(Ordering::Relaxed) {
                std::thread::yield_now();
            }
            cancel.store(true, Ordering::Relaxed);
        });
        let r = download_file(&small, &info, &d.path().join("dst"), &WriteOptions::from(io()), &cancel, Some(&progress));
        cancel.store(true, Ordering::Relaxed);
        r
    })
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Interrupted, "{e}");
    assert_eq!(cacheless_testkit::names(d.path()), ["src"]);
}

#[test]
fn http_downloads_use_ranges_where_the_server_has_them_and_one_stream_where_not() {
    let Some(http) = servers::http() else { return };
    let no = AtomicBool::new(false);
    let d = cacheless_testkit::scratch();
    let name = format!("http-{}.bin", std::process::id());
    let body = data(5 * MIB + 5, 3);
    for (folder, ranged) in [("ranges", true), ("noranges", false)] {
        std::fs::write(http.root.join(folder).join(&name), &body).unwrap();
        let loc = Location::parse(&format!("{}/{folder}/{name}", http.origin)).unwrap();
        let remote = Remote::connect(&loc, &RemoteOptions { part_size: MIB, ..RemoteOptions::default() }).unwrap();
        let info = remote.head(&loc).unwrap();
        assert_eq!(info.size, body.len() as u64);
        assert!(info.etag.is_some(), "nginx gives an ETag");
        let dst = d.path().join(folder);
        let got = download_file(&remote, &info, &dst, &WriteOptions::from(io()), &no, None).unwrap();
        assert_eq!(got.fetch.ranged, ranged, "{folder}");
        assert_eq!(got.fetch.ranges, if ranged { 6 } else { 0 }, "{folder}");
        assert_eq!(resident(&dst), 0, "{folder}");
        assert_eq!(std::fs::read(&dst).unwrap(), body, "{folder}");
        std::fs::remove_file(http.root.join(folder).join(&name)).unwrap();
        let e = remote.head(&loc).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    }
}

#[test]
fn the_open_upload_check_sees_an_open_upload() {
    use std::io::Write;
    let Some(s3) = servers::s3() else { return };
    let pre = prefix("open");
    let remote = Arc::new(client(&s3, 5 * MIB));
    let loc = Location::parse(&s3.url(&format!("{pre}obj"))).unwrap();
    let (mut w, handle) = cacheless_remote::upload_stream(remote, &loc, &Budget::new(32 * MIB), Arc::new(AtomicBool::new(false))).unwrap();
    w.write_all(&vec![7u8; 6 * MIB]).unwrap();
    // The first part is on its way once the second begins; give the server a moment to see it.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(s3.open_uploads(&pre), [format!("{pre}obj")]);
    assert!(s3.open_uploads("elsewhere/").is_empty());
    drop((w, handle));
    assert!(s3.open_uploads(&pre).is_empty());
}
