//! The remote edge held to the peers' results, on both S3 implementations the test command
//! starts (SeaweedFS and moto) and on web servers that behave and misbehave: keys stored and
//! fetched exactly as written, as the AWS CLI and rclone store and fetch them; HTTP paths sent
//! as curl sends them; a transfer that did not get every byte fails, as `curl -f` fails; a
//! prefix's keys that no local name can hold skipped and the rest copied, folder markers
//! skipped, as `aws s3 cp --recursive` does; errors that carry the service's code and message,
//! never a body, a signature or a credential; TLS trust from AWS_CA_BUNDLE, --ca-bundle and
//! SSL_CERT_FILE; a URL's user and password sent as Basic credentials and never shown;
//! `--bwlimit` holding for transfers.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Instant;

use cacheless_testkit::scratch;
use cacheless_testkit::servers::{self, S3};

const MIB: usize = 1 << 20;

fn data(len: usize, seed: u64) -> Vec<u8> {
    cacheless_testkit::random_bytes(len, seed)
}

/// cacheless with the AWS environment pointing at `s3`.
fn ours(s3: &S3) -> Command {
    let mut c = cacheless_testkit::cacheless();
    c.envs(s3.env()).env_remove("AWS_CA_BUNDLE");
    c
}

fn run(c: &mut Command) -> Output {
    c.output().expect("run")
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "exit {:?}\nstdout: {}\nstderr: {}", o.status, String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Every path under `root` (relative, sorted), as text.
fn paths(root: &Path) -> Vec<String> {
    cacheless_testkit::tree::paths(root).into_iter().map(|p| p.to_string_lossy().into_owned()).collect()
}

fn prefix(test: &str) -> String {
    format!("peers-{test}-{}/", std::process::id())
}

/// The keys of the corpus below a prefix of `pre` bytes: every character the AWS CLI and rclone
/// keep as it is and object stores' clients get wrong, a key of 1,024 bytes with the prefix
/// (S3's longest), and a key that is also a prefix.
fn corpus(pre: usize) -> Vec<String> {
    let mut keys: Vec<String> =
        ["ünï.txt", "a b.txt", "plus+sign", "pct%20lit", "q?mark", "hash#tag", "[br]", "star*", "pipe|", "caret^", "tilde~", "eq=sign", "mix ü+%?#[]*|^~=.bin"]
            .iter()
            .map(|k| k.to_string())
            .collect();
    // Parts of at most 200 bytes: SeaweedFS keeps a key as a path, whose names are at most 255.
    let mut long = String::new();
    while pre + long.len() < 1024 {
        let part = (1024 - pre - long.len()).min(200);
        if !long.is_empty() {
            long.push('/');
        }
        let n = part.min(1024 - pre - long.len());
        long.push_str(&"k".repeat(n));
    }
    assert_eq!(pre + long.len(), 1024);
    keys.push(long);
    keys.push("both".into());
    keys.push("both/inner".into());
    keys
}

/// The keys under `pre` as the AWS CLI lists them (relative to `pre`).
fn aws_keys(s3: &S3, pre: &str) -> Option<BTreeSet<String>> {
    let mut aws = servers::aws(s3)?;
    let o = run(aws.args(["s3api", "list-objects-v2", "--bucket", &s3.bucket, "--prefix", pre, "--output", "json"]));
    let v: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    Some(v["Contents"].as_array().unwrap().iter().map(|c| c["Key"].as_str().unwrap().strip_prefix(pre).unwrap().to_string()).collect())
}

/// The keys under `pre` as rclone lists them (relative to `pre`).
fn rclone_keys(s3: &S3, pre: &str) -> Option<BTreeSet<String>> {
    let mut rc = servers::rclone(s3)?;
    let o = run(rc.args(["lsjson", "-R", "--files-only", &format!("s3:{}/{pre}", s3.bucket)]));
    let v: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    Some(v.as_array().unwrap().iter().map(|c| c["Path"].as_str().unwrap().to_string()).collect())
}

#[test]
fn keys_are_stored_and_fetched_exactly_as_written_as_the_aws_cli_and_rclone_do() {
    for s3 in servers::all_s3() {
        let pre = prefix("keys");
        let d = scratch();
        let keys = corpus(pre.len());
        // Up with cacheless, one file per key.
        for (i, k) in keys.iter().enumerate() {
            let f = d.path().join(format!("f{i}"));
            std::fs::write(&f, data(100 + i, i as u64)).unwrap();
            ok(&run(ours(&s3).args(["cp", s(&f), &s3.url(&format!("{pre}{k}"))])));
        }
        let want: BTreeSet<String> = keys.iter().cloned().collect();
        if let Some(listed) = aws_keys(&s3, &pre) {
            assert_eq!(listed, want, "{:?}: the AWS CLI lists other keys", s3.kind);
        }
        if let Some(listed) = rclone_keys(&s3, &pre) {
            assert_eq!(listed, want, "{:?}: rclone lists other keys", s3.kind);
        }
        // Down with cacheless and with the AWS CLI: the same bytes.
        for (i, k) in keys.iter().enumerate() {
            let body = data(100 + i, i as u64);
            let got = d.path().join(format!("got{i}"));
            ok(&run(ours(&s3).args(["cp", &s3.url(&format!("{pre}{k}")), s(&got)])));
            assert!(std::fs::read(&got).unwrap() == body, "{:?} {k}", s3.kind);
            if let Some(mut aws) = servers::aws(&s3) {
                let theirs = d.path().join(format!("aws{i}"));
                ok(&run(aws.args(["s3", "cp", &s3.url(&format!("{pre}{k}")), s(&theirs)])));
                assert!(std::fs::read(&theirs).unwrap() == body, "{:?} {k} by the AWS CLI", s3.kind);
            }
        }
        // Up with the AWS CLI, down with cacheless.
        if let Some(mut aws) = servers::aws(&s3) {
            let body = data(777, 77);
            let f = d.path().join("theirs");
            std::fs::write(&f, &body).unwrap();
            let key = format!("{pre}aws/ünï +%?#[]*|^~=.bin");
            ok(&run(aws.args(["s3api", "put-object", "--bucket", &s3.bucket, "--key", &key, "--body", s(&f)])));
            let got = d.path().join("from-aws");
            ok(&run(ours(&s3).args(["cp", &s3.url(&key), s(&got)])));
            assert!(std::fs::read(&got).unwrap() == body, "{:?}", s3.kind);
        }
        // A prefix holding them all, copied whole: every key that can be a local file lands at
        // its path; `both` and `both/inner` cannot both (a file and a folder of one name), and
        // the one that fails is reported, as the AWS CLI reports it.
        let back = d.path().join("back");
        let o = run(ours(&s3).args(["cp", "-r", &s3.url(&pre), s(&back)]));
        assert_eq!(o.status.code(), Some(1), "{:?}: {}", s3.kind, err(&o));
        for (i, k) in keys.iter().enumerate().filter(|(_, k)| !k.starts_with("both")) {
            assert!(std::fs::read(back.join(k)).unwrap() == data(100 + i, i as u64), "{:?} {k}", s3.kind);
        }
    }
}

#[test]
fn http_paths_are_sent_as_curl_sends_them() {
    let Some(h) = servers::http() else { return };
    let d = scratch();
    let names = ["a b.bin", "ü.bin", "t~x.bin", "pct%20.bin", "plus+.bin"];
    for (i, n) in names.iter().enumerate() {
        std::fs::write(h.root.join("ranges").join(n), data(3 * MIB + i, 40 + i as u64)).unwrap();
    }
    // As a person writes them in a URL: a space and ü raw or encoded, % as %25.
    let urls = ["a%20b.bin", "a b.bin", "ü.bin", "%C3%BC.bin", "t~x.bin", "pct%2520.bin", "plus+.bin"];
    for u in urls {
        let url = format!("{}/ranges/{u}", h.origin);
        let name = percent_decoded(u);
        let body = std::fs::read(h.root.join("ranges").join(&name)).unwrap();
        let got = d.path().join("got");
        ok(&run(cacheless_testkit::cacheless().args(["cp", "--part-size", "1M", &url, s(&got)])));
        assert!(std::fs::read(&got).unwrap() == body, "{u}");
        let curl = run(Command::new("curl").args(["-sSfg", "-o", s(&d.path().join("curl")), &url.replace(' ', "%20")]));
        ok(&curl);
        assert!(std::fs::read(d.path().join("curl")).unwrap() == body, "{u} by curl");
        // Into a folder: named as wget names it, the last part decoded.
        let into = d.path().join("into");
        std::fs::create_dir_all(&into).unwrap();
        ok(&run(cacheless_testkit::cacheless().args(["cp", &url, s(&into)])));
        assert!(std::fs::read(into.join(&name)).unwrap() == body, "{u} into a folder");
        std::fs::remove_dir_all(&into).unwrap();
    }
}

fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap(), 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

#[test]
fn a_prefix_copy_skips_keys_no_local_name_can_hold_and_folder_markers_as_the_aws_cli_does() {
    for s3 in servers::all_s3() {
        let Some(_) = servers::aws(&s3) else { return };
        let pre = prefix("odd");
        let d = scratch();
        let f = d.path().join("f");
        std::fs::write(&f, b"bytes").unwrap();
        let empty = d.path().join("empty");
        std::fs::write(&empty, b"").unwrap();
        let put = |key: &str, body: &Path| {
            let mut aws = servers::aws(&s3).unwrap();
            run(aws.args(["s3api", "put-object", "--bucket", &s3.bucket, "--key", &format!("{pre}{key}"), "--body", s(body)])).status.success()
        };
        assert!(put("p/ok.txt", &f) && put("p/sub/ok2.txt", &f));
        // Keys with a .. part and a newline: where the server takes them (SeaweedFS refuses the
        // first, moto the second).
        let dots = put("p/../x", &f);
        let newline = put("p/new\nline", &f);
        assert!(dots || newline, "{:?} took neither odd key", s3.kind);
        // Folder markers, one of them over a folder with a file.
        assert!(put("p/dir/", &empty) && put("p/dir/x.txt", &f) && put("p/lone/", &empty));
        let dest = d.path().join("a").join("dest");
        let o = run(ours(&s3).args(["cp", "-r", &s3.url(&format!("{pre}p/")), s(&dest)]));
        assert_eq!(o.status.code(), Some(1), "{:?}: {}", s3.kind, err(&o));
        assert!(!dots || (err(&o).contains("p/../x") && err(&o).contains("skipped")), "{}", err(&o));
        if newline {
            assert!(err(&o).contains("control character"), "{}", err(&o));
        }
        let got = paths(&dest);
        assert_eq!(got, ["dir", "dir/x.txt", "ok.txt", "sub", "sub/ok2.txt"], "{:?}", s3.kind);
        assert!(!d.path().join("a").join("x").exists(), "written outside the destination");
        // The AWS CLI copies the same files (and warns of ../x, exiting non-zero).
        let theirs = d.path().join("b").join("dest");
        let mut aws = servers::aws(&s3).unwrap();
        let a = run(aws.args(["s3", "cp", "--recursive", "--quiet", &s3.url(&format!("{pre}p/")), s(&theirs)]));
        // It refuses ../x too (a warning, and a non-zero exit); a newline it keeps in a name.
        assert!(!dots || a.status.code() != Some(0), "the AWS CLI: {}", err(&a));
        let mut theirs_files: Vec<String> = paths(&theirs).into_iter().filter(|p| theirs.join(p).is_file()).collect();
        theirs_files.retain(|p| !p.contains('\n'));
        let ours_files: Vec<String> = got.iter().filter(|p| dest.join(p).is_file()).cloned().collect();
        assert_eq!(ours_files, theirs_files, "{:?}", s3.kind);
        // Only folder markers and good keys: nothing to report, exit 0, as the AWS CLI.
        let clean = d.path().join("clean");
        ok(&run(ours(&s3).args(["cp", "-r", &s3.url(&format!("{pre}p/dir/")), s(&clean)])));
        assert_eq!(paths(&clean), ["x.txt"]);
        let mut aws = servers::aws(&s3).unwrap();
        ok(&run(aws.args(["s3", "cp", "--recursive", "--quiet", &s3.url(&format!("{pre}p/dir/")), s(&d.path().join("clean-aws"))])));
    }
}

/// The modes of the misbehaving server a download must fail on (and curl -f with it), and
/// those it must get right (as curl does). `longhead` (a HEAD that states more bytes than the
/// object has) and `badrange` (a range answered with other bytes) fail too, where curl, which
/// asks for neither a HEAD nor a range, does not see the lie: the server's answers disagree,
/// and nothing is guessed.
const BAD: [&str; 8] = ["503", "cut", "longhead", "badrange", "lyinglength", "stall", "stallhead", "redirectloop"];
const UNSEEN_BY_CURL: [&str; 2] = ["longhead", "badrange"];
const GOOD: [&str; 4] = ["ok", "noranges", "range200", "redirect"];

#[test]
fn a_transfer_that_did_not_get_every_byte_fails_as_curl_fails_and_leaves_nothing() {
    let Some(h) = servers::bad_http() else { return };
    let d = scratch();
    let body = data(3 * MIB + 5, 50);
    std::fs::write(h.root.join("bad.bin"), &body).unwrap();
    let quick = ["--part-size", "1M", "--retries", "1", "--read-timeout", "1"];
    for mode in BAD.iter().chain(GOOD.iter()) {
        let good = GOOD.contains(mode);
        let url = h.url(mode, "bad.bin");
        let out = d.path().join(format!("out-{mode}"));
        let o = run(cacheless_testkit::cacheless().arg("cp").args(quick).args([&url, s(&out)]));
        let curl = run(Command::new("curl").args(["-sSf", "-L", "--max-time", "8", "-o", s(&d.path().join(format!("curl-{mode}"))), &url]));
        assert_eq!(curl.status.success(), good || UNSEEN_BY_CURL.contains(mode), "curl on {mode}: {}", err(&curl));
        if good {
            ok(&o);
            assert!(std::fs::read(&out).unwrap() == body, "{mode}");
            continue;
        }
        assert_eq!(o.status.code(), Some(1), "cp of {mode}: {}", err(&o));
        assert!(err(&o).contains(&url), "{mode}: {}", err(&o));
        assert!(!out.exists(), "{mode}: a file under the final name");
        assert!(cacheless_testkit::names(d.path()).iter().all(|n| !n.contains(".cacheless-")), "{mode}: a temporary left");
        // cat and hash fail too, and say nothing of a checksum.
        let c = run(cacheless_testkit::cacheless().arg("cat").args(quick).arg(&url));
        assert_eq!(c.status.code(), Some(1), "cat of {mode}");
        assert!(c.stdout.len() < body.len(), "cat of {mode} printed it all");
        let hsh = run(cacheless_testkit::cacheless().arg("hash").args(quick).arg(&url));
        assert_eq!(hsh.status.code(), Some(1), "hash of {mode}");
        assert!(hsh.stdout.is_empty(), "hash of {mode}: {}", String::from_utf8_lossy(&hsh.stdout));
    }
}

/// A download from a server that sends its headers and then nothing waits as long as the read
/// timeout allows (120 s by default); SIGINT or SIGTERM ends it within a second, and nothing is
/// left: `cp` and `extract` of a URL (whose archive is read through a stream of its own) with
/// 130 or 143 and a word of it, `cat` and `hash` killed by the signal as GNU cat and sha256sum are.
#[test]
fn a_download_waiting_on_a_stalled_server_ends_on_a_signal() {
    use rustix::process::Signal;
    let Some(h) = servers::bad_http() else { return };
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), data(2 * MIB, 70)).unwrap();
    let tar = h.root.join("stalled.tar");
    assert!(Command::new("tar").arg("-cf").arg(&tar).arg("-C").arg(&src).arg("f").status().unwrap().success());
    let url = h.url("stall", "stalled.tar");
    let out = d.path().join("out");
    for (sig, code) in [(Signal::INT, 130), (Signal::TERM, 143)] {
        let cases: [(&str, Vec<&str>); 4] =
            [("cp", vec!["cp", &url, s(&out)]), ("cat", vec!["cat", &url]), ("hash", vec!["hash", &url]), ("extract", vec!["extract", "-C", s(&out), &url])];
        for (what, args) in cases {
            let child = cacheless_testkit::cacheless().args(&args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
            let t0 = Instant::now();
            let o = cacheless_testkit::interrupt(child, std::time::Duration::from_millis(700), sig);
            assert!(t0.elapsed() < std::time::Duration::from_millis(1700), "{what} on SIG{sig:?}: {:?}", t0.elapsed());
            use std::os::unix::process::ExitStatusExt;
            if o.status.signal() == Some(sig.as_raw()) {
                // `cat` and `hash` write nothing but their output, and end as GNU cat and
                // sha256sum end: killed by the signal.
                assert!(what == "cat" || what == "hash", "{what} killed by SIG{sig:?}");
            } else {
                assert_eq!(o.status.code(), Some(code), "{what}: {}", err(&o));
                assert!(err(&o).contains("interrupted"), "{what}: {}", err(&o));
            }
            let left: Vec<_> = std::fs::read_dir(&out).map(|r| r.map(|e| e.unwrap().file_name()).collect()).unwrap_or_default();
            assert!(left.is_empty() && !out.is_file(), "{what}: {left:?}");
            assert!(cacheless_testkit::names(d.path()).iter().all(|n| !n.contains(".cacheless-")), "{what}: a temporary left");
        }
    }
}

#[test]
fn errors_carry_the_service_s_code_and_message_never_a_body_a_signature_or_a_key() {
    let Some(h) = servers::bad_http() else { return };
    let Some(s3) = servers::s3() else { return };
    let d = scratch();
    let f = d.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    // An endpoint that echoes each request into its 403 answer (the bucket `echo`).
    let echo = |args: &[&str]| run(ours(&s3).args(["--endpoint-url", &h.origin]).args(args));
    let out = d.path().join("out");
    // An upload and a listing get an error document (its code shown); a HEAD gets no body.
    for (o, doc) in
        [(echo(&["cp", s(&f), "s3://echo/k"]), true), (echo(&["cp", "-r", "s3://echo/p/", s(&out)]), true), (echo(&["cp", "s3://echo/k", s(&out)]), false)]
    {
        assert_eq!(o.status.code(), Some(1));
        let e = err(&o);
        assert!(e.contains("access denied (HTTP 403 Forbidden") && (!doc || e.contains("AccessDenied: Access Denied")), "{e}");
        for secret in [s3.key.as_str(), s3.secret.as_str(), "Signature", "Credential=", "x-amz-", "Authorization", "Echo"] {
            assert!(!e.contains(secret), "{secret} shown: {e}");
        }
    }
    // Over HTTP: the status, nothing of the body.
    let o = run(cacheless_testkit::cacheless().args(["cp", &h.url("echo", "f"), s(&out)]));
    assert!(err(&o).contains("HTTP 403") && !err(&o).contains("Echo") && !err(&o).contains("GET /"), "{}", err(&o));
}

#[test]
fn tls_trust_comes_from_aws_ca_bundle_ca_bundle_or_ssl_cert_file_and_a_failure_says_so() {
    let Some(t) = servers::tls() else { return };
    let Some(moto) = servers::moto() else { return };
    let d = scratch();
    let body = data(MIB + 9, 61);
    std::fs::write(t.http.root.join("tls.bin"), &body).unwrap();
    let out = d.path().join("out");
    // HTTPS: not trusted, then trusted through SSL_CERT_FILE.
    let o = run(cacheless_testkit::cacheless().env_remove("SSL_CERT_FILE").env_remove("SSL_CERT_DIR").args(["cp", &t.http.url("ok", "tls.bin"), s(&out)]));
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("certificate is not trusted") && err(&o).contains("SSL_CERT_FILE"), "{}", err(&o));
    assert!(!err(&o).contains("cannot reach the server"), "{}", err(&o));
    ok(&run(cacheless_testkit::cacheless().env("SSL_CERT_FILE", &t.ca).args(["cp", &t.http.url("ok", "tls.bin"), s(&out)])));
    assert!(std::fs::read(&out).unwrap() == body);
    // S3 over TLS: AWS_CA_BUNDLE, or --ca-bundle.
    let key = format!("{}tls", prefix("tls"));
    let f = d.path().join("f");
    std::fs::write(&f, &body).unwrap();
    let o = run(ours(&moto).args(["cp", "--endpoint-url", &t.moto, s(&f), &moto.url(&key)]));
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("certificate is not trusted") && err(&o).contains("AWS_CA_BUNDLE"), "{}", err(&o));
    ok(&run(ours(&moto).env("AWS_CA_BUNDLE", &t.ca).args(["cp", "--endpoint-url", &t.moto, s(&f), &moto.url(&key)])));
    let back = d.path().join("back");
    ok(&run(ours(&moto).args(["cp", "--ca-bundle", s(&t.ca), "--endpoint-url", &t.moto, &moto.url(&key), s(&back)])));
    assert!(std::fs::read(&back).unwrap() == body);
}

#[test]
fn a_url_s_user_and_password_go_as_basic_credentials_and_are_never_shown() {
    let Some(h) = servers::bad_http() else { return };
    let d = scratch();
    let body = data(2 * MIB + 1, 71);
    std::fs::write(h.root.join("auth.bin"), &body).unwrap();
    let with = |user: &str| h.url("auth", "auth.bin").replacen("http://", &format!("http://{user}@"), 1);
    let out = d.path().join("out");
    ok(&run(cacheless_testkit::cacheless().args(["cp", "--part-size", "1M", &with("user:secret"), s(&out)])));
    assert!(std::fs::read(&out).unwrap() == body);
    // curl sends them the same way.
    ok(&run(Command::new("curl").args(["-sSf", "-o", s(&d.path().join("curl")), &with("user:secret")])));
    for (user, note) in [("user:wrongpassword", "refused the user and password"), ("", "asks for credentials")] {
        let url = if user.is_empty() { h.url("auth", "auth.bin") } else { with(user) };
        let o = run(cacheless_testkit::cacheless().args(["cp", "-v", &url, s(&d.path().join("no"))]));
        assert_eq!(o.status.code(), Some(1));
        let e = err(&o);
        assert!(e.contains("401") && e.contains(note), "{e}");
        assert!(!e.contains("wrongpassword") && !String::from_utf8_lossy(&o.stdout).contains("wrongpassword"), "the password shown: {e}");
        assert!(!e.contains("AWS_"), "an S3 hint for a web server: {e}");
    }
}

#[test]
fn bwlimit_holds_for_downloads_and_uploads() {
    let Some(h) = servers::http() else { return };
    let Some(s3) = servers::s3() else { return };
    let d = scratch();
    let body = data(4 * MIB, 81);
    std::fs::write(h.root.join("ranges").join("slow.bin"), &body).unwrap();
    // 4 MiB at 2 MiB/s: two seconds less the limiter's burst of a tenth of one.
    for (what, args) in [
        ("download", vec!["cp".to_string(), "--bwlimit".into(), "2M".into(), format!("{}/ranges/slow.bin", h.origin), s(&d.path().join("got")).into()]),
        (
            "upload",
            vec![
                "cp".to_string(),
                "--bwlimit".into(),
                "2M".into(),
                s(&h.root.join("ranges").join("slow.bin")).into(),
                s3.url(&format!("{}slow", prefix("bw"))),
            ],
        ),
    ] {
        let t0 = Instant::now();
        let o = run(ours(&s3).args(&args).arg("--json"));
        let report: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
        assert_eq!(report["bwlimit"], 2 * MIB, "{what}: {report}");
        let took = t0.elapsed().as_secs_f64();
        assert!(took >= 1.6, "{what} of 4 MiB at 2 MiB/s took {took:.2} s");
    }
    assert!(std::fs::read(d.path().join("got")).unwrap() == body);
}
