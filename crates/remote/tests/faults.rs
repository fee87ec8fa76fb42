//! Transfers through a proxy that injects faults between the client and the real servers:
//! resets, cut and stalled bodies, 500 and 503 are retried and the result is byte-exact; an
//! object replaced mid-download, or a server that keeps failing, ends in a clear error with
//! nothing under the final name and no multipart upload left open.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use cacheless::{Budget, ErrorKind, IoOptions, WriteOptions};
use cacheless_remote::{download_file, fetch_into, upload_file, Credentials, Location, Remote, RemoteOptions};
use cacheless_testkit::proxy::{Fault, FaultProxy, Request};
use cacheless_testkit::servers::{self, S3};

const MIB: usize = 1 << 20;

fn data(len: usize, seed: u64) -> Vec<u8> {
    cacheless_testkit::random_bytes(len, seed)
}

fn io() -> IoOptions {
    IoOptions::new(Budget::new(64 * MIB))
}

/// A client of `s3` through `endpoint` (the proxy), with 1 MiB ranges and a 1 s stall limit.
fn client(s3: &S3, endpoint: &str, part: usize, retries: usize) -> Remote {
    let credentials = Some(Credentials { key_id: s3.key.clone(), secret: s3.secret.clone(), token: None });
    let opts = RemoteOptions {
        part_size: part,
        endpoint: Some(endpoint.to_string()),
        region: Some("us-east-1".into()),
        credentials,
        stall: Duration::from_secs(1),
        retries,
        ..RemoteOptions::default()
    };
    Remote::connect(&Location::parse(&s3.url("")).unwrap(), &opts).unwrap()
}

/// The ranged GETs numbered 1 to 5 each meet one fault: a reset, a cut body, 500, 503, a stall.
fn one_fault_each(r: &Request) -> Fault {
    if !r.ranged() {
        return Fault::Pass;
    }
    match r.index {
        1 => Fault::Reset(300_000),
        2 => Fault::Truncate(500_000),
        3 => Fault::Status(500),
        4 => Fault::Status(503),
        5 => Fault::Stall(100_000, Duration::from_secs(4)),
        _ => Fault::Pass,
    }
}

/// `len` random bytes (from `seed`) uploaded to `key` (in a scratch folder as `src` too): the
/// folder, the bytes, the object, and a client that reaches the server directly.
fn uploaded(s3: &S3, key: &str, len: usize, seed: u64) -> (tempfile::TempDir, Vec<u8>, Location, Remote) {
    let d = cacheless_testkit::scratch();
    let body = data(len, seed);
    let src = d.path().join("src");
    std::fs::write(&src, &body).unwrap();
    let direct = client(s3, &s3.endpoint, MIB, 5);
    let loc = Location::parse(&s3.url(key)).unwrap();
    upload_file(&direct, &src, &loc, &io(), false, &AtomicBool::new(false), None).unwrap();
    (d, body, loc, direct)
}

#[test]
fn resets_cut_and_stalled_bodies_and_server_errors_are_retried_to_a_byte_exact_file() {
    let Some(s3) = servers::s3() else { return };
    let key = format!("faults-{}/obj", std::process::id());
    let (d, body, loc, direct) = uploaded(&s3, &key, 12 * MIB + 11, 5);
    let src = d.path().join("src");
    let no = AtomicBool::new(false);
    let proxy = FaultProxy::start(&s3.endpoint, one_fault_each);
    let remote = client(&s3, &proxy.url(), MIB, 5);
    let info = remote.head(&loc).unwrap();
    let dst = d.path().join("dst");
    download_file(&remote, &info, &dst, &WriteOptions::from(io()), &no, None).unwrap();
    assert_eq!(proxy.faults().len(), 5, "{:?}", proxy.faults());
    assert_eq!(std::fs::read(&dst).unwrap(), body);
    // The same faults on an upload's parts (PUTs).
    let proxy = FaultProxy::start(&s3.endpoint, |r| match (r.method(), r.index) {
        ("PUT", 2) => Fault::Status(500),
        ("PUT", 3) => Fault::Status(503),
        ("PUT", 4) => Fault::Reset(0),
        _ => Fault::Pass,
    });
    let remote = client(&s3, &proxy.url(), 5 * MIB, 5);
    let up = Location::parse(&s3.url(&format!("{key}-up"))).unwrap();
    upload_file(&remote, &src, &up, &io(), false, &no, None).unwrap();
    assert_eq!(proxy.faults().len(), 3, "{:?}", proxy.faults());
    let back = d.path().join("back");
    download_file(&direct, &direct.head(&up).unwrap(), &back, &WriteOptions::from(io()), &no, None).unwrap();
    assert_eq!(std::fs::read(&back).unwrap(), body);
}

#[test]
fn a_server_that_keeps_failing_ends_in_an_error_and_leaves_nothing() {
    let Some(s3) = servers::s3() else { return };
    let pre = format!("failing-{}/", std::process::id());
    let d = cacheless_testkit::scratch();
    let body = data(11 * MIB, 6);
    let src = d.path().join("src");
    std::fs::write(&src, &body).unwrap();
    let no = AtomicBool::new(false);
    let direct = client(&s3, &s3.endpoint, MIB, 5);
    let loc = Location::parse(&s3.url(&format!("{pre}obj"))).unwrap();
    upload_file(&direct, &src, &loc, &io(), false, &no, None).unwrap();
    // Every ranged GET after the third answers 503.
    let proxy = FaultProxy::start(&s3.endpoint, |r| if r.ranged() && r.index > 3 { Fault::Status(503) } else { Fault::Pass });
    let remote = client(&s3, &proxy.url(), MIB, 2);
    let info = remote.head(&loc).unwrap();
    let e = download_file(&remote, &info, &d.path().join("dst"), &WriteOptions::from(io()), &no, None).unwrap_err();
    assert!(e.to_string().contains(&loc.to_string()), "{e}");
    assert!(e.to_string().contains("503"), "{e}");
    assert_eq!(cacheless_testkit::names(d.path()), ["src"]);
    // Every part after the first fails: the upload is aborted, no object, no parts left.
    let proxy = FaultProxy::start(&s3.endpoint, |r| if r.method() == "PUT" && r.index > 1 { Fault::Status(500) } else { Fault::Pass });
    let remote = client(&s3, &proxy.url(), 5 * MIB, 1);
    let up = Location::parse(&s3.url(&format!("{pre}up"))).unwrap();
    let e = upload_file(&remote, &src, &up, &io(), false, &no, None).unwrap_err();
    assert!(e.to_string().contains(&up.to_string()), "{e}");
    assert_eq!(direct.head(&up).unwrap_err().kind(), ErrorKind::NotFound);
    assert!(s3.open_uploads(&pre).is_empty(), "{:?}", s3.open_uploads(&pre));
}

#[test]
fn an_object_replaced_mid_download_is_an_error_never_a_mix() {
    let Some(s3) = servers::s3() else { return };
    let key = format!("replaced-{}/obj", std::process::id());
    let d = cacheless_testkit::scratch();
    let src = d.path().join("src");
    std::fs::write(&src, data(8 * MIB, 7)).unwrap();
    let other = d.path().join("other");
    std::fs::write(&other, data(8 * MIB, 8)).unwrap();
    let no = AtomicBool::new(false);
    let direct = client(&s3, &s3.endpoint, MIB, 5);
    let loc = Location::parse(&s3.url(&key)).unwrap();
    upload_file(&direct, &src, &loc, &io(), false, &no, None).unwrap();
    // At the fourth ranged GET, the object is replaced (same size, other bytes).
    let (s3b, locb, otherb) = (s3.clone(), loc.clone(), other.clone());
    let proxy = FaultProxy::start(&s3.endpoint, move |r| {
        if r.ranged() && r.index == 4 {
            let c = client(&s3b, &s3b.endpoint, MIB, 5);
            upload_file(&c, &otherb, &locb, &io(), false, &AtomicBool::new(false), None).unwrap();
        }
        Fault::Pass
    });
    let remote = client(&s3, &proxy.url(), MIB, 5);
    let info = remote.head(&loc).unwrap();
    let e = download_file(&remote, &info, &d.path().join("dst"), &WriteOptions::from(io()), &no, None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Changed, "{e}");
    assert_eq!(cacheless_testkit::names(d.path()), ["other", "src"]);
    // Over HTTP: nginx's ETag (time and size) changes with the file.
    let Some(http) = servers::http() else { return };
    let name = format!("replaced-{}.bin", std::process::id());
    let served = http.root.join("ranges").join(&name);
    std::fs::write(&served, data(8 * MIB, 7)).unwrap();
    let servedb = served.clone();
    let proxy = FaultProxy::start(&http.origin, move |r| {
        if r.ranged() && r.index == 4 {
            std::fs::write(&servedb, data(8 * MIB, 8)).unwrap();
            let f = std::fs::File::options().write(true).open(&servedb).unwrap();
            f.set_modified(std::time::SystemTime::now() + Duration::from_secs(10)).unwrap();
        }
        Fault::Pass
    });
    let loc = Location::parse(&format!("{}/ranges/{name}", proxy.url())).unwrap();
    let remote = Remote::connect(&loc, &RemoteOptions { part_size: MIB, ..RemoteOptions::default() }).unwrap();
    let info = remote.head(&loc).unwrap();
    let e = download_file(&remote, &info, &d.path().join("dst"), &WriteOptions::from(io()), &no, None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Changed, "{e}");
    assert_eq!(cacheless_testkit::names(d.path()), ["other", "src"]);
    std::fs::remove_file(&served).unwrap();
}

#[test]
fn fetches_straight_into_memory_retry_the_same_faults_and_refuse_a_replaced_object() {
    let Some(s3) = servers::s3() else { return };
    let key = format!("into-{}/obj", std::process::id());
    let (d, body, loc, direct) = uploaded(&s3, &key, 9 * MIB + 5, 9);
    let no = AtomicBool::new(false);
    let proxy = FaultProxy::start(&s3.endpoint, one_fault_each);
    let remote = client(&s3, &proxy.url(), MIB, 5);
    let info = remote.head(&loc).unwrap();
    // Two pieces at odd offsets, each cut into 1 MiB ranges.
    let (mut a, mut b) = (vec![0u8; 3 * MIB + 7], vec![0u8; 4 * MIB]);
    let rep = fetch_into(&remote, &info, vec![(5 * MIB as u64 + 5, &mut b[..]), (11, &mut a[..])], &no, None).unwrap();
    assert_eq!(proxy.faults().len(), 5, "{:?}", proxy.faults());
    assert_eq!(rep.bytes, (a.len() + b.len()) as u64);
    assert_eq!((a.as_slice(), b.as_slice()), (&body[11..11 + a.len()], &body[5 * MIB + 5..]));
    // Past the end: refused before any request.
    let mut c = [0u8; 16];
    let e = fetch_into(&remote, &info, vec![(body.len() as u64 - 8, &mut c[..])], &no, None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    // Replaced at the third ranged GET: an error, whatever was placed is not to be used.
    let (s3b, locb) = (s3.clone(), loc.clone());
    let other = d.path().join("other");
    std::fs::write(&other, data(9 * MIB + 5, 10)).unwrap();
    let proxy = FaultProxy::start(&s3.endpoint, move |r| {
        if r.ranged() && r.index == 3 {
            let c = client(&s3b, &s3b.endpoint, MIB, 5);
            upload_file(&c, &other, &locb, &io(), false, &AtomicBool::new(false), None).unwrap();
        }
        Fault::Pass
    });
    let remote = client(&s3, &proxy.url(), MIB, 5);
    let mut all = vec![0u8; body.len()];
    let e = fetch_into(&remote, &info, vec![(0, &mut all[..])], &no, None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Changed, "{e}");
    // A cancelled fetch stops with Interrupted.
    let e = fetch_into(&direct, &direct.head(&loc).unwrap(), vec![(0, &mut all[..])], &AtomicBool::new(true), None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Interrupted, "{e}");
}
