//! The command line with URLs, against the real servers the test command starts (SeaweedFS for
//! S3, nginx for HTTP): `cp` both ways (files and trees), `cat`, `hash` and `info` of objects,
//! byte-exact against the sources and sha256sum; `-n`/`-u`; failures that exit 1 naming the URL
//! and what to try; Ctrl-C during a download and an upload. Nothing is ever left under a final
//! name or key, no multipart upload is left open, and no landed file is resident.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use cacheless_testkit::proxy::{Fault, FaultProxy};
use cacheless_testkit::servers::{self, S3};
use cacheless_testkit::{interrupt, scratch};

const MIB: usize = 1 << 20;

fn data(len: usize, seed: u64) -> Vec<u8> {
    cacheless_testkit::random_bytes(len, seed)
}

/// cacheless with the AWS environment pointing at `s3` (through `endpoint` when given).
fn cmd(s3: &S3, endpoint: Option<&str>) -> Command {
    let mut c = cacheless_testkit::cacheless();
    for (k, v) in s3.env() {
        c.env(k, v);
    }
    if let Some(e) = endpoint {
        c.env("AWS_ENDPOINT_URL", e);
    }
    c
}

fn run(c: &mut Command) -> Output {
    c.output().expect("run cacheless")
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "exit {:?}\nstdout: {}\nstderr: {}", o.status, String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn resident(p: &Path) -> u64 {
    cacheless::residency::residency_of(p).unwrap().cached_bytes()
}

fn sha256sum(p: &Path) -> String {
    let o = Command::new("sha256sum").arg(p).output().unwrap();
    String::from_utf8_lossy(&o.stdout).split_whitespace().next().unwrap().to_string()
}

fn prefix(test: &str) -> String {
    format!("cli-{test}-{}/", std::process::id())
}

#[test]
fn cp_cat_hash_and_info_of_s3_objects_are_byte_exact() {
    let Some(s3) = servers::s3() else { return };
    let pre = prefix("s3");
    let d = scratch();
    for (i, len) in [0, 1, 8 * MIB + 1, 21 * MIB].into_iter().enumerate() {
        let body = data(len, i as u64);
        let src = d.path().join(format!("src{i}"));
        std::fs::write(&src, &body).unwrap();
        let url = s3.url(&format!("{pre}obj{i}"));
        let o = run(cmd(&s3, None).args(["cp", "--verify", "--json", s(&src), &url]));
        let report: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
        assert_eq!(report["transfers"][0]["verified"], true, "{report}");
        assert_eq!(report["transfers"][0]["bytes"], len, "{report}");
        // Down again, into a folder (named as the key's last part), and to a file name.
        let into = d.path().join(format!("into{i}"));
        std::fs::create_dir(&into).unwrap();
        ok(&run(cmd(&s3, None).args(["cp", &url, s(&into)])));
        let got = into.join(format!("obj{i}"));
        assert_eq!(resident(&got), 0, "{len} B");
        assert_eq!(std::fs::read(&got).unwrap(), body, "{len} B");
        let named = d.path().join(format!("named{i}"));
        ok(&run(cmd(&s3, None).args(["cp", &url, s(&named)])));
        assert_eq!(std::fs::read(&named).unwrap(), body);
        // cat and hash: the bytes, in order; sha256sum's digest.
        assert_eq!(run(cmd(&s3, None).args(["cat", &url])).stdout, body, "{len} B");
        let line = ok(&run(cmd(&s3, None).args(["hash", &url])));
        assert_eq!(line, format!("{}  {url}\n", sha256sum(&src)));
        // info: the size, the ETag and ranges.
        let info: serde_json::Value = serde_json::from_str(&ok(&run(cmd(&s3, None).args(["info", "--json", &url])))).unwrap();
        let o = &info["objects"][0];
        assert_eq!(o["size"], len, "{info}");
        assert_eq!(o["ranges"], true, "{info}");
        assert_eq!(o["etag_is_md5"], len <= 8 * MIB, "{info}");
        assert_eq!(o["requests"], len.div_ceil(8 * MIB), "{info}");
    }
    assert!(s3.open_uploads(&pre).is_empty());
}

#[test]
fn cp_cat_hash_and_info_over_http_with_and_without_ranges() {
    let Some(http) = servers::http() else { return };
    let d = scratch();
    let name = format!("cli-{}.bin", std::process::id());
    let body = data(9 * MIB + 3, 4);
    for (folder, ranged) in [("ranges", true), ("noranges", false)] {
        let served = http.root.join(folder).join(&name);
        std::fs::write(&served, &body).unwrap();
        let url = format!("{}/{folder}/{name}", http.origin);
        let to = d.path().join(folder);
        let o = run(cacheless_testkit::cacheless().args(["cp", "--json", "--part-size", "1M", &url, s(&to)]));
        let report: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
        assert_eq!(report["transfers"][0]["requests"], if ranged { 10 } else { 0 }, "{report}");
        assert_eq!(resident(&to), 0, "{folder}");
        assert_eq!(std::fs::read(&to).unwrap(), body, "{folder}");
        assert_eq!(run(cacheless_testkit::cacheless().args(["cat", &url])).stdout, body);
        assert_eq!(ok(&run(cacheless_testkit::cacheless().args(["hash", &url]))), format!("{}  {url}\n", sha256sum(&served)));
        let text = ok(&run(cacheless_testkit::cacheless().args(["info", &url])));
        assert!(text.contains(if ranged { "ranges         yes" } else { "ranges         no" }), "{text}");
        std::fs::remove_file(&served).unwrap();
        // A file the server does not have: exit 1, its URL, nothing landed.
        let missing = d.path().join("missing");
        let o = run(cacheless_testkit::cacheless().args(["cp", &url, s(&missing)]));
        assert_eq!(o.status.code(), Some(1));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(&url) && err.contains("no such object"), "{err}");
        assert!(!missing.exists());
    }
    // A web server takes no uploads: cp and pack refuse, exit 1, nothing served under the name.
    let src = d.path().join("src");
    std::fs::write(&src, &body).unwrap();
    let up = format!("{}/ranges/up-{name}", http.origin);
    for args in [vec!["cp", s(&src), up.as_str()], vec!["pack", "-C", s(d.path()), "-o", up.as_str(), "src"]] {
        let o = run(cacheless_testkit::cacheless().args(&args));
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(&up) && err.contains("uploads go to s3://"), "{err}");
        assert!(!http.root.join("ranges").join(format!("up-{name}")).exists());
    }
}

#[test]
fn cp_r_moves_a_prefix_of_10000_objects_both_ways() {
    let Some(s3) = servers::s3() else { return };
    let pre = prefix("tree");
    let d = scratch();
    let src = d.path().join("src");
    for i in 0..10_000usize {
        let sub = src.join(format!("d{}", i % 7));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(format!("f{i:05}")), data(i % 5000, i as u64)).unwrap();
    }
    let url = s3.url(&pre);
    ok(&run(cmd(&s3, None).args(["cp", "-r", s(&src), &url])));
    let back = d.path().join("back");
    let o = run(cmd(&s3, None).args(["cp", "-r", "--json", &url, s(&back)]));
    let report: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    assert_eq!(report["transfers"].as_array().unwrap().len(), 10_000);
    let diff = Command::new("diff").args(["-r", s(&src), s(&back)]).output().unwrap();
    assert!(diff.status.success(), "{}", String::from_utf8_lossy(&diff.stdout));
    // -n: nothing is fetched again; -u: only what changed.
    let o = run(cmd(&s3, None).args(["cp", "-r", "-n", "--json", &url, s(&back)]));
    let report: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    assert!(report["transfers"].as_array().unwrap().iter().all(|t| t["skipped"] == true));
    let changed = src.join("d3").join("f00003");
    std::fs::write(&changed, b"new bytes").unwrap();
    ok(&run(cmd(&s3, None).args(["cp", s(&changed), &s3.url(&format!("{pre}d3/f00003"))])));
    let o = run(cmd(&s3, None).args(["cp", "-r", "-u", "--json", &url, s(&back)]));
    let report: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    let fetched: Vec<_> = report["transfers"].as_array().unwrap().iter().filter(|t| t["skipped"] == false).collect();
    assert_eq!(fetched.len(), 1, "{fetched:?}");
    assert_eq!(std::fs::read(back.join("d3").join("f00003")).unwrap(), b"new bytes");
}

#[test]
fn failures_exit_1_naming_the_url_and_what_to_try_and_leave_nothing() {
    let Some(s3) = servers::s3() else { return };
    let pre = prefix("fail");
    let d = scratch();
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let src = d.path().join("src");
    std::fs::write(&src, data(12 * MIB, 9)).unwrap();
    let check = |o: &Output, url: &str, words: &[&str]| {
        assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(url), "{err}");
        for w in words {
            assert!(err.contains(w), "{w}: {err}");
        }
        assert!(cacheless_testkit::names(&out).is_empty(), "{:?}", cacheless_testkit::names(&out));
    };
    let missing = s3.url(&format!("{pre}nothing"));
    check(&run(cmd(&s3, None).args(["cp", &missing, s(&out)])), &missing, &["no such object", "check the bucket and key"]);
    let nob = "s3://no-such-bucket-cacheless/x";
    check(&run(cmd(&s3, None).args(["cp", nob, s(&out)])), nob, &["no such object"]);
    // Wrong credentials, both ways.
    let up = s3.url(&format!("{pre}up"));
    for args in [vec!["cp", missing.as_str(), s(&out)], vec!["cp", s(&src), up.as_str()]] {
        let url = if args[1] == missing { &missing } else { &up };
        check(&run(cmd(&s3, None).env("AWS_SECRET_ACCESS_KEY", "wrong").args(&args)), url, &["access denied", "AWS_SECRET_ACCESS_KEY"]);
    }
    // A server that is down.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let down = format!("http://127.0.0.1:{closed}");
    check(&run(cmd(&s3, Some(&down)).args(["cp", &missing, s(&out)])), &missing, &["cannot reach the server", "AWS_ENDPOINT_URL"]);
    check(&run(cmd(&s3, Some(&down)).args(["cp", s(&src), &up])), &up, &["cannot reach the server"]);
    // A prefix without -r; copying between URLs.
    check(&run(cmd(&s3, None).args(["cp", &s3.url(&pre), s(&out)])), &s3.url(&pre), &["-r not specified; omitting directory"]);
    let o = run(cmd(&s3, None).args(["cp", &missing, &up]));
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not supported"));
    assert!(s3.open_uploads(&pre).is_empty(), "{:?}", s3.open_uploads(&pre));
    let o = run(cmd(&s3, None).args(["info", &up]));
    assert_eq!(o.status.code(), Some(1), "no object was made");
}

#[test]
fn ctrl_c_or_sigterm_during_a_download_or_an_upload_leaves_nothing() {
    let Some(s3) = servers::s3() else { return };
    let pre = prefix("signal");
    let d = scratch();
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let src = d.path().join("src");
    std::fs::write(&src, data(40 * MIB, 10)).unwrap();
    let url = s3.url(&format!("{pre}obj"));
    ok(&run(cmd(&s3, None).args(["cp", s(&src), &url])));
    // The server holds the fourth request for a while: the transfer is surely under way when
    // the signal comes.
    let hold = |method: &'static str| {
        FaultProxy::start(&s3.endpoint, move |r| if r.method() == method && r.index == 4 { Fault::Hold(Duration::from_secs(30)) } else { Fault::Pass })
    };
    for (sig, code) in [(rustix::process::Signal::INT, 130), (rustix::process::Signal::TERM, 143)] {
        let proxy = hold("GET");
        let child = cmd(&s3, Some(&proxy.url()))
            .args(["cp", "--part-size", "1M", "--concurrency", "2", &url, s(&out.join("got"))])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let o = interrupt(child, Duration::from_millis(1500), sig);
        assert_eq!(o.status.code(), Some(code), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(proxy.requests() >= 4);
        assert!(cacheless_testkit::names(&out).is_empty(), "{:?}", cacheless_testkit::names(&out));
        let proxy = hold("PUT");
        let up = s3.url(&format!("{pre}up-{code}"));
        let child = cmd(&s3, Some(&proxy.url())).args(["cp", s(&src), &up]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let o = interrupt(child, Duration::from_millis(1500), sig);
        assert_eq!(o.status.code(), Some(code), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(run(cmd(&s3, None).args(["info", &up])).status.code(), Some(1), "no object");
        assert!(s3.open_uploads(&format!("{pre}up")).is_empty(), "{:?}", s3.open_uploads(&pre));
    }
}

/// A tree with a large file, many small ones, a folder and a symbolic link, aged.
fn tree(root: &Path) {
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("big.bin"), data(20 * MIB + 17, 11)).unwrap();
    for i in 0..300usize {
        std::fs::write(root.join("sub").join(format!("f{i:03}")), data(i * 37, i as u64)).unwrap();
    }
    std::os::unix::fs::symlink("big.bin", root.join("link")).unwrap();
    cacheless_testkit::tree::age(root);
}

#[test]
fn pack_to_s3_then_extract_from_s3_and_http_gives_what_gnu_tar_extracts() {
    let Some(s3) = servers::s3() else { return };
    let Some(http) = servers::http() else { return };
    let pre = prefix("archive");
    let d = scratch();
    tree(&d.path().join("src"));
    let url = s3.url(&format!("{pre}t.tar.zst"));
    // Frames of 1 MiB, parts of 5 MiB: parts go up while frames are compressed.
    let o = run(cmd(&s3, None).args(["pack", "-v", "--frame-size", "1M", "--part-size", "5M", "-o", &url, "-C", s(d.path()), "src"]));
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stderr).contains("parts"), "{}", String::from_utf8_lossy(&o.stderr));
    // A prefix is no object's key: refused, naming it, with no upload started.
    let folder = s3.url(&format!("{pre}folder/"));
    let o = run(cmd(&s3, None).args(["pack", "-o", &folder, "-C", s(d.path()), "src"]));
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&folder) && err.contains("not a prefix"), "{err}");
    assert!(s3.open_uploads(&pre).is_empty(), "{:?}", s3.open_uploads(&pre));
    // GNU tar's extraction of the same bytes is the oracle.
    let local = d.path().join("t.tar.zst");
    ok(&run(cmd(&s3, None).args(["cp", &url, s(&local)])));
    let gnu = d.path().join("gnu");
    std::fs::create_dir(&gnu).unwrap();
    let t = Command::new("tar").args(["-I", "zstd", "-xf", s(&local), "-C", s(&gnu)]).output().unwrap();
    assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));
    let want = cacheless_testkit::tree::snapshot(&gnu, (i64::MAX, 0));
    let name = format!("archive-{}.tar.zst", std::process::id());
    for folder in ["ranges", "noranges"] {
        std::fs::copy(&local, http.root.join(folder).join(&name)).unwrap();
    }
    let sources = [url.clone(), format!("{}/ranges/{name}", http.origin), format!("{}/noranges/{name}", http.origin)];
    for (i, src) in sources.iter().enumerate() {
        let out = d.path().join(format!("out{i}"));
        std::fs::create_dir(&out).unwrap();
        let o = run(cmd(&s3, None).args(["extract", "--debug", src, "-C", s(&out)]));
        ok(&o);
        assert!(String::from_utf8_lossy(&o.stderr).contains("read remote"), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(resident(&out.join("src/big.bin")), 0, "{src}");
        assert_eq!(cacheless_testkit::tree::snapshot(&out, (i64::MAX, 0)), want, "{src}");
    }
    for folder in ["ranges", "noranges"] {
        std::fs::remove_file(http.root.join(folder).join(&name)).unwrap();
    }
    // A missing archive: exit 1 naming it, nothing extracted.
    let out = d.path().join("none");
    std::fs::create_dir(&out).unwrap();
    let missing = s3.url(&format!("{pre}missing.tar.zst"));
    let o = run(cmd(&s3, None).args(["extract", &missing, "-C", s(&out)]));
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains(&missing));
    assert!(cacheless_testkit::names(&out).is_empty());
}

#[test]
fn an_interrupted_pack_to_s3_leaves_no_object_and_no_parts() {
    let Some(s3) = servers::s3() else { return };
    let pre = prefix("packsig");
    let d = scratch();
    tree(&d.path().join("src"));
    let url = s3.url(&format!("{pre}t.tar.zst"));
    // The server holds the second part: the pack is surely under way when the signal comes.
    let proxy = FaultProxy::start(&s3.endpoint, |r| if r.method() == "PUT" && r.index == 2 { Fault::Hold(Duration::from_secs(30)) } else { Fault::Pass });
    let child = cmd(&s3, Some(&proxy.url()))
        .args(["pack", "--frame-size", "1M", "--part-size", "5M", "-o", &url, "-C", s(d.path()), "src"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = interrupt(child, Duration::from_millis(1500), rustix::process::Signal::INT);
    assert_eq!(o.status.code(), Some(130), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(run(cmd(&s3, None).args(["info", &url])).status.code(), Some(1), "no object");
    assert!(s3.open_uploads(&pre).is_empty(), "{:?}", s3.open_uploads(&pre));
}
