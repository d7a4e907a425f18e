//! `hcclwatch bench` as an SRE runs it: real processes over TCP on 127.0.0.1, the
//! nccl-tests table parsed back, `#wrong` = 0; JSON rows; a rank killed with SIGKILL
//! mid-run makes every other rank fail within the execution timeout.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_hcclwatch"))
}

/// Runs `cmd` to the end and returns its output; the test fails with the command's
/// stderr unless it succeeded.
fn succeed(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Parses the table's data rows: (size, count, type, redop, root, time, algbw, busbw, wrong).
fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

#[test]
fn table_for_every_operation_has_no_wrong_elements() {
    for (op, ranks, extra) in [
        ("all_reduce", "3", vec!["-d", "bfp16"]),
        (
            "all_reduce",
            "4",
            vec![
                "-o",
                "max",
                "-d",
                "int8",
                "--algo",
                "level0:NA;level1:H-D_R",
            ],
        ),
        ("all_gather", "3", vec![]),
        ("reduce_scatter", "2", vec!["-o", "prod", "-d", "int32"]),
        ("broadcast", "3", vec!["-r", "2"]),
        ("reduce", "3", vec!["-r", "1", "-d", "fp16"]),
        ("all_to_all", "2", vec![]),
        ("sendrecv", "3", vec![]),
        ("p2p", "2", vec![]),
    ] {
        let out = bench()
            .args([
                "bench", op, "--ranks", ranks, "-b", "8", "-e", "1M", "-f", "8", "-n", "2", "-w",
                "1", "-c", "1",
            ])
            .args(&extra)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{op}: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rows = rows(&stdout);
        assert!(rows.len() >= 4, "{op}: {stdout}");
        for r in &rows {
            assert_eq!(r.len(), 10, "{op}: {r:?}");
            assert_eq!(r[8], "0", "{op}: wrong elements in {r:?}");
            let busbw: f64 = r[7].parse().unwrap();
            assert!(busbw >= 0.0);
        }
        assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
        // Sizes follow -b/-e/-f: 8 B rounded to whole elements/blocks, ×8 up to 1 MiB.
        let last: usize = rows.last().unwrap()[0].parse().unwrap();
        assert!(last <= 1 << 20 && last > 1 << 17, "{op}: last size {last}");
    }
}

#[test]
fn authenticated_payloads_give_the_same_results_and_say_so() {
    let out = bench()
        .args([
            "bench",
            "all_reduce",
            "--ranks",
            "2",
            "-b",
            "8",
            "-e",
            "4M",
            "-f",
            "16",
            "-n",
            "2",
            "-w",
            "1",
            "-c",
            "1",
            "--authenticate-payloads",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("payloads authenticated"), "{stdout}");
    let rows = rows(&stdout);
    assert!(rows.len() >= 3, "{stdout}");
    for r in &rows {
        assert_eq!(r[8], "0", "wrong elements in {r:?}");
    }
}

#[test]
fn json_rows_and_artifacts() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.json");
    let plot = dir.path().join("busbw.svg");
    let out = succeed(
        bench()
            .args([
                "bench",
                "all_reduce",
                "--ranks",
                "2",
                "-b",
                "1K",
                "-e",
                "64K",
                "-f",
                "4",
                "-n",
                "2",
                "-w",
                "0",
                "--json",
            ])
            .arg("--timeline")
            .arg(&trace)
            .arg("--plot")
            .arg(&plot),
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0]["size"], 1024);
    assert_eq!(lines[0]["type"], "fp32");
    assert_eq!(lines[0]["wrong"], 0);
    assert_eq!(lines[3]["size"], 65536);
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    // One trace with a process track per rank, on one clock: both ranks ran the same
    // operations at the same time.
    let ev = t["traceEvents"].as_array().unwrap();
    let ops = |pid: u64| -> Vec<(f64, f64)> {
        ev.iter()
            .filter(|e| e["pid"] == pid && e["name"] == "all_reduce" && e["ph"] == "X")
            .map(|e| (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap()))
            .collect()
    };
    let (r0, r1) = (ops(0), ops(1));
    assert!(
        !r0.is_empty() && r0.len() == r1.len(),
        "{} vs {}",
        r0.len(),
        r1.len()
    );
    for ((t0, d0), (t1, d1)) in r0.iter().zip(&r1) {
        assert!(
            t0 < &(t1 + d1) && t1 < &(t0 + d0),
            "op at {t0}+{d0} on rank 0, {t1}+{d1} on rank 1"
        );
    }
    for r in 0..2u64 {
        assert!(
            ev.iter().any(|e| e["ph"] == "M"
                && e["pid"] == r
                && e["args"]["name"] == format!("rank {r}")),
            "rank {r} names its track"
        );
    }
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg"), "{svg}");
    // The series is a line in the first series colour; the axis titles and a legend entry
    // naming the series are text.
    let text: Vec<&str> = svg.lines().map(str::trim).collect();
    assert!(
        svg.lines()
            .any(|l| l.starts_with("<polyline") && l.contains(r##"stroke="#1F77B4""##)),
        "{svg}"
    );
    for t in ["busbw (GB/s)", "message size (bytes, log scale)"] {
        assert!(text.contains(&t), "no {t:?} in {svg}");
    }
    assert!(text.iter().any(|t| t.starts_with("all_reduce ")), "{svg}");
}

/// `--plot FILE.png` draws the same chart as a PNG: decoded, it has the chart's size and
/// pixels of the first series' colour (a line was drawn), not just a white canvas, and text
/// left of the plot area (the y tick labels and title, from the bundled font).
#[test]
fn plot_as_png() {
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("busbw.png");
    succeed(
        bench()
            .args([
                "bench",
                "all_reduce",
                "--ranks",
                "2",
                "-b",
                "1K",
                "-e",
                "256K",
                "-f",
                "4",
                "-n",
                "2",
                "-w",
                "0",
            ])
            .arg("--plot")
            .arg(&plot),
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&plot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (720, 420));
    assert_eq!(info.color_type, png::ColorType::Rgb);
    let px = &buf[..info.buffer_size()];
    let count = |c: [u8; 3]| px.chunks_exact(3).filter(|p| *p == c).count();
    assert!(count([0x1f, 0x77, 0xb4]) > 200, "the series line is drawn");
    assert!(count([0, 0, 0]) > 500, "axes and labels are drawn");
    assert!(
        count([0xff, 0xff, 0xff]) > px.len() / 3 / 2,
        "mostly background"
    );
    let width = info.width as usize;
    let dark_left_of_axis = px
        .chunks_exact(3)
        .enumerate()
        .filter(|(i, p)| i % width < 50 && p.iter().all(|c| *c < 0x80))
        .count();
    assert!(
        dark_left_of_axis > 100,
        "y labels are drawn: {dark_left_of_axis}"
    );
}

/// `--ranks` binds each rank to its own CPU when there are enough (as mpirun does for two
/// ranks), and rank 0 reports the binding it reads back from the kernel; `--bind-to none`
/// and more ranks than CPUs leave placement to the scheduler.
#[test]
fn ranks_are_bound_to_cpus_when_there_are_enough() {
    let header = |ranks: &str, extra: &[&str]| {
        let out = succeed(
            bench()
                .args([
                    "bench",
                    "all_reduce",
                    "--ranks",
                    ranks,
                    "-b",
                    "8",
                    "-e",
                    "8",
                ])
                .args(["-n", "5", "-w", "1"])
                .args(extra),
        );
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let first = stdout.lines().next().unwrap_or_default().to_string();
        assert!(
            first.starts_with("# hcclwatch bench all_reduce"),
            "{stdout}"
        );
        first
    };
    // The CPUs this test may use, as the launcher sees them (its affinity mask).
    let allowed = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|l| {
            l.trim()
                .split(',')
                .map(|r| match r.split_once('-') {
                    Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
                    None => 1,
                })
                .sum::<usize>()
        })
        .unwrap();
    let bound = header("2", &[]);
    if allowed >= 2 {
        assert!(bound.contains("(rank 0 bound to CPU "), "{bound}");
    } else {
        assert!(!bound.contains("bound"), "one CPU, two ranks: {bound}");
    }
    let free = header("2", &["--bind-to", "none"]);
    assert!(!free.contains("bound"), "{free}");
    let over = header(&(allowed + 1).to_string(), &[]);
    assert!(
        !over.contains("bound"),
        "{} ranks on {allowed} CPUs: {over}",
        allowed + 1
    );
}

#[test]
fn bad_flags_are_clear_errors() {
    let out = bench()
        .args(["bench", "all_reduce", "--ranks", "2", "--plot", "chart.jpg"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("name the file *.svg or *.png"));
    let out = bench()
        .args(["bench", "all_gatherz", "--ranks", "2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown operation \"all_gatherz\""));
    let out = bench()
        .args(["bench", "all_reduce", "--ranks", "2", "-b", "12Q"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("size \"12Q\" is not a number"));
    let out = bench()
        .args([
            "bench",
            "all_reduce",
            "--ranks",
            "2",
            "--algo",
            "level1:NHR",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not implemented by hcclwatch's TCP engine")
    );
    let out = bench()
        .args(["bench", "all_reduce", "--ranks", "2", "--bind-to", "socket"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--bind-to"));
}

#[test]
fn rank_killed_mid_run_fails_every_other_rank_within_the_timeout() {
    let key_dir = tempfile::tempdir().unwrap();
    let key = common::write_key(key_dir.path(), "key");
    let port = common::free_port();
    let root = format!("127.0.0.1:{port}");
    let spawn = |r: usize| {
        bench()
            .args([
                "bench",
                "all_reduce",
                "--world",
                "3",
                "--rank",
                &r.to_string(),
                "--root",
                &root,
            ])
            .args([
                "-b",
                "16M",
                "-e",
                "16M",
                "-n",
                "100000",
                "-w",
                "0",
                "-c",
                "0",
                "--key-file",
            ])
            .arg(&key)
            .env("HCCL_EXEC_TIMEOUT", "10")
            .env("HCCL_CONNECT_TIMEOUT", "20")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut ranks: Vec<_> = (0..3).map(spawn).collect();
    // Wait until every rank is moving data: each has spent CPU time beyond start-up.
    let cpu_ticks = |pid: u32| -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let f: Vec<&str> = after.split_whitespace().collect();
        f.get(11).and_then(|u| u.parse().ok()).unwrap_or(0)
            + f.get(12).and_then(|s| s.parse().ok()).unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ranks.iter().all(|r| cpu_ticks(r.id()) >= 20) {
        assert!(Instant::now() < deadline, "ranks never started moving data");
        std::thread::sleep(Duration::from_millis(20));
    }
    for r in &mut ranks {
        assert!(
            r.try_wait().unwrap().is_none(),
            "a rank exited before the kill"
        );
    }
    let mut victim = ranks.remove(1);
    let killed_at = Instant::now();
    // Child::kill sends SIGKILL, exactly kill -9.
    victim.kill().unwrap();
    let _ = victim.wait();
    for mut r in ranks {
        let deadline = Instant::now() + Duration::from_secs(15);
        let status = loop {
            if let Some(s) = r.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "a surviving rank did not fail within the timeout"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(!status.success());
        let mut err = String::new();
        std::io::Read::read_to_string(r.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert!(
            err.contains("HCCL_E_TCP_TRANSFER")
                || err.contains("HCCL_E_TIMEOUT")
                || err.contains("HCCL_E_REMOTE"),
            "{err}"
        );
        assert!(err.contains("with peer rank"), "{err}");
    }
    assert!(
        killed_at.elapsed() < Duration::from_secs(12),
        "took {:?}",
        killed_at.elapsed()
    );
}

#[test]
fn ranks_from_an_hccl_rank_table() {
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<u16> = (0..3).map(|_| common::free_port()).collect();
    let table = format!(
        r#"{{"status":"completed","version":"1.0","server_count":"2","server_list":[
          {{"server_id":"node_0","host_ip":"127.0.0.1","device":[
            {{"device_id":"0","device_ip":"192.168.1.8","rank_id":"0","host_port":"{}"}},
            {{"device_id":"1","device_ip":"192.168.1.9","rank_id":"1","host_port":"{}"}}]}},
          {{"server_id":"node_1","host_ip":"127.0.0.1","device":[
            {{"device_id":"0","device_ip":"192.168.2.8","rank_id":"2","host_port":"{}"}}]}}]}}"#,
        ports[0], ports[1], ports[2]
    );
    let path = dir.path().join("rank_table.json");
    std::fs::write(&path, table).unwrap();
    let key = common::write_key(dir.path(), "key");
    let children: Vec<_> = (0..3)
        .map(|r| {
            bench()
                .args([
                    "bench",
                    "all_gather",
                    "--rank",
                    &r.to_string(),
                    "-b",
                    "1K",
                    "-e",
                    "64K",
                    "-f",
                    "8",
                    "-n",
                    "2",
                    "-w",
                    "1",
                ])
                .arg("--rank-table")
                .arg(&path)
                .arg("--key-file")
                .arg(&key)
                .env("HCCL_CONNECT_TIMEOUT", "20")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for (r, o) in outs.iter().enumerate() {
        assert!(
            o.status.success(),
            "rank {r}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let table = String::from_utf8_lossy(&outs[0].stdout);
    assert!(table.contains("3 ranks"), "{table}");
    let rows = rows(&table);
    assert_eq!(rows.len(), 3, "{table}");
    assert!(rows.iter().all(|r| r[8] == "0"), "{table}");
    // A broken table is refused with the field named.
    std::fs::write(&path, r#"{"version":"1.0","server_list":[{"server_id":"a","device":[{"device_id":"0","rank_id":0}]}]}"#).unwrap();
    let o = bench()
        .args(["bench", "all_gather", "--rank", "0"])
        .arg("--rank-table")
        .arg(&path)
        .arg("--key-file")
        .arg(&key)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("server_list[0].device[0].rank_id: expected a string"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn ranks_from_the_static_peer_list_of_a_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<u16> = (0..2).map(|_| common::free_port()).collect();
    let key = common::write_key(dir.path(), "probe.key");
    let cfg = dir.path().join("hcclwatch.toml");
    std::fs::write(
        &cfg,
        format!(
            "[collective]\npeers = [\"127.0.0.1:{}\", \"127.0.0.1:{}\"]\nkey_file = \"{}\"\nchannels = 1\nalgo = \"level0:NA;level1:ring\"\n",
            ports[0],
            ports[1],
            key.display()
        ),
    )
    .unwrap();
    let children: Vec<_> = (0..2)
        .map(|r| {
            bench()
                .args([
                    "bench",
                    "all_reduce",
                    "--rank",
                    &r.to_string(),
                    "-b",
                    "4K",
                    "-e",
                    "4K",
                    "-n",
                    "2",
                    "-w",
                    "0",
                ])
                .arg("--config.file")
                .arg(&cfg)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for (r, o) in outs.iter().enumerate() {
        assert!(
            o.status.success(),
            "rank {r}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let table = String::from_utf8_lossy(&outs[0].stdout);
    let rows = rows(&table);
    assert_eq!(rows.len(), 1, "{table}");
    assert_eq!(rows[0][8], "0");
    assert_eq!(rows[0][9], "ring", "collective.algo is honoured: {table}");
}

#[test]
fn bind_device_pins_connections_to_an_interface() {
    // Binding to the loopback interface works for loopback peers ...
    succeed(bench().args([
        "bench",
        "p2p",
        "--ranks",
        "2",
        "-b",
        "1M",
        "-e",
        "1M",
        "-n",
        "2",
        "-w",
        "0",
        "--bind-device",
        "lo",
    ]));
    // ... and a missing interface is a clear connect error, not a hang.
    let out = bench()
        .args([
            "bench",
            "p2p",
            "--ranks",
            "2",
            "-b",
            "1K",
            "-e",
            "1K",
            "-n",
            "1",
            "-w",
            "0",
            "--bind-device",
            "nosuchif0",
        ])
        .env("HCCL_CONNECT_TIMEOUT", "5")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("HCCL_E_TCP_CONNECT") && err.contains("No such device"),
        "{err}"
    );
}
