//! Pod attribution against stand-ins that speak the real protocols:
//!
//! - [`FakeKubelet`] stands in for the kubelet: it serves the pod-resources v1 gRPC API
//!   (`v1.PodResourcesLister`) on a unix socket, with the server generated from the same
//!   upstream `.proto` as the daemon's client, so the bytes on the socket are the real wire
//!   format;
//! - `common::fake_apiserver` stands in for the Kubernetes API server (pods with
//!   annotations and container statuses, filtered by the field selector the daemon sends);
//! - a temporary directory stands in for the host's `/proc`, with `<pid>/cgroup` files in
//!   the cgroup v1 and v2 forms of containerd and CRI-O.
//!
//! The NPUs come from the fake DCMI library's 16-NPU scenario. Its NPU processes (PIDs
//! 20000 and up, `dcmi_get_device_resource_info`) are not processes of this host, so the
//! process tests drive the attribution poller directly with an NPU snapshot the test
//! builds, as DCMI would report it, and a `/proc` of its own; the daemon tests cover
//! pod-resources and the Kubernetes API end to end, with the memory group (which reads
//! the processes) off.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::fake_apiserver::FakeApi;
use common::{Daemon, Start, fake_config, samples};
use hcclwatch::attribution::pod_resources::proto::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use hcclwatch::attribution::pod_resources::proto::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices,
    ContainerResources, GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesRequest,
    ListPodResourcesResponse, PodResources,
};
use hcclwatch::attribution::{Poller, Settings};
use hcclwatch::snapshot::attribution::{AttributionSnapshot, Evidence, Source};
use hcclwatch::snapshot::npu::{ChipAddress, ChipReadings, NpuProcess, NpuSnapshot};
use serde_json::{Value, json};
use tonic::{Request, Response, Status};

/// What the kubelet stand-in answers.
#[derive(Default)]
struct KubeletState {
    pods: Vec<PodResources>,
    /// Answer every call with this status code instead.
    fail: Option<tonic::Code>,
    /// Wait this long before answering.
    hang: Option<Duration>,
    /// Calls that started waiting because of `hang`.
    hung: u64,
}

#[derive(Clone)]
struct KubeletService(Arc<(Mutex<KubeletState>, std::sync::Condvar)>);

#[tonic::async_trait]
impl PodResourcesLister for KubeletService {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        let (pods, fail, hang) = {
            let mut s = self.0.0.lock().unwrap();
            s.hung += u64::from(s.hang.is_some());
            self.0.1.notify_all();
            (s.pods.clone(), s.fail, s.hang)
        };
        if let Some(d) = hang {
            tokio::time::sleep(d).await;
        }
        match fail {
            Some(code) => Err(Status::new(code, "the kubelet stand-in was told to fail")),
            None => Ok(Response::new(ListPodResourcesResponse {
                pod_resources: pods,
            })),
        }
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        Err(Status::unimplemented("not used by hcclwatch"))
    }

    async fn get(
        &self,
        _: Request<GetPodResourcesRequest>,
    ) -> Result<Response<GetPodResourcesResponse>, Status> {
        Err(Status::unimplemented("not used by hcclwatch"))
    }
}

/// Stands in for the kubelet's pod-resources endpoint on a unix socket; stops on drop.
struct FakeKubelet {
    socket: PathBuf,
    state: Arc<(Mutex<KubeletState>, std::sync::Condvar)>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl FakeKubelet {
    fn start(pods: Vec<PodResources>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("kubelet.sock");
        let state = Arc::new((
            Mutex::new(KubeletState {
                pods,
                ..KubeletState::default()
            }),
            std::sync::Condvar::new(),
        ));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let service = KubeletService(state.clone());
        let path = socket.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::UnixListener::bind(&path).unwrap();
                ready_tx.send(()).unwrap();
                tonic::transport::Server::builder()
                    .add_service(PodResourcesListerServer::new(service))
                    .serve_with_incoming_shutdown(
                        tokio_stream::wrappers::UnixListenerStream::new(listener),
                        async {
                            let _ = stopped.await;
                        },
                    )
                    .await
                    .unwrap();
            });
        });
        ready.recv_timeout(Duration::from_secs(10)).unwrap();
        Self {
            socket,
            state,
            stop: Some(stop),
            _dir: dir,
        }
    }

    fn set(&self, f: impl FnOnce(&mut KubeletState)) {
        f(&mut self.state.0.lock().unwrap());
    }

    /// Waits until `n` calls have started hanging (see [`KubeletState::hang`]).
    fn wait_hung(&self, n: u64, within: Duration) {
        let (lock, cv) = &*self.state;
        let (state, _) = cv
            .wait_timeout_while(lock.lock().unwrap(), within, |s| s.hung < n)
            .unwrap();
        assert!(
            state.hung >= n,
            "{} of {n} pod-resources calls hanging after {within:?}",
            state.hung
        );
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// (resource name, device IDs) of one container.
type Devices<'a> = &'a [(&'a str, &'a [&'a str])];

/// A pod as pod-resources lists it: containers with their devices.
fn pr_pod(ns: &str, name: &str, containers: &[(&str, Devices<'_>)]) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: ns.into(),
        containers: containers
            .iter()
            .map(|(c, devs)| ContainerResources {
                name: (*c).into(),
                devices: devs
                    .iter()
                    .map(|(r, ids)| ContainerDevices {
                        resource_name: (*r).into(),
                        device_ids: ids.iter().map(|s| s.to_string()).collect(),
                        topology: None,
                    })
                    .collect(),
                ..ContainerResources::default()
            })
            .collect(),
        ..PodResources::default()
    }
}

/// A pod as the API server holds it: (container, NPU resource limit, status container ID).
fn api_pod(
    ns: &str,
    name: &str,
    uid: &str,
    node: &str,
    annotations: &[(&str, &str)],
    containers: &[(&str, Option<&str>, Option<&str>)],
) -> Value {
    let ann: serde_json::Map<String, Value> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let spec: Vec<Value> = containers
        .iter()
        .map(|(c, res, _)| match res {
            Some(r) => json!({"name": c, "image": "img", "resources": {"limits": {*r: "1"}}}),
            None => json!({"name": c, "image": "img"}),
        })
        .collect();
    let statuses: Vec<Value> = containers
        .iter()
        .map(|(c, _, id)| {
            let mut s =
                json!({"name": c, "image": "img", "imageID": "", "ready": true, "restartCount": 0});
            if let Some(id) = id {
                s["containerID"] = json!(id);
            }
            s
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": uid, "annotations": ann},
        "spec": {"nodeName": node, "containers": spec},
        "status": {"phase": "Running", "containerStatuses": statuses},
    })
}

fn scenario_16() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake-dcmi/scenarios/16-npu.json"),
    )
    .unwrap()
}

/// The `uuid` label of NPU `phy` as the scenario's VDIE words make it.
fn scenario_uuid(phy: u64) -> String {
    let s: Value = serde_json::from_str(&scenario_16()).unwrap();
    let chip = s["cards"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["chips"].as_array().unwrap().iter())
        .find(|c| c["phy_id"] == phy)
        .unwrap();
    chip["vdie_id"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| format!("{:08X}", w.as_u64().unwrap()))
        .collect::<Vec<_>>()
        .join("-")
}

/// Every `hcclwatch_npu_allocation_info` series as (npu, namespace/pod, container).
fn allocations(text: &str) -> BTreeSet<(String, String, String)> {
    text.lines()
        .filter(|l| l.starts_with("hcclwatch_npu_allocation_info{"))
        .map(|l| {
            let labels =
                common::parse_labels(l.split_once('{').unwrap().1.rsplit_once('}').unwrap().0);
            let get = |k: &str| {
                labels
                    .iter()
                    .find(|(lk, _)| lk == k)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_else(|| "-".into())
            };
            (
                get("npu"),
                format!("{}/{}", get("namespace"), get("pod")),
                get("container"),
            )
        })
        .collect()
}

fn set(items: &[(&str, &str, &str)]) -> BTreeSet<(String, String, String)> {
    items
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect()
}

/// The kubelet's and the API server's view of node n1 (and one pod on n2).
fn cluster() -> (FakeKubelet, FakeApi) {
    let kubelet = FakeKubelet::start(vec![
        pr_pod(
            "ml",
            "train-0",
            &[(
                "main",
                &[("huawei.com/Ascend910", &["Ascend910-0", "Ascend910-1"])],
            )],
        ),
        // Two vNPU slices of chip 2, held by two pods.
        pr_pod(
            "ml",
            "infer-a",
            &[(
                "srv",
                &[("huawei.com/Ascend910-2c", &["Ascend910-2c-100-2"])],
            )],
        ),
        pr_pod(
            "ml",
            "infer-b",
            &[(
                "srv",
                &[("huawei.com/Ascend910-2c", &["Ascend910-2c-101-2"])],
            )],
        ),
        // Under Volcano kubelet allocated "Ascend910-3"; the plugin mounted 6 and 7.
        pr_pod(
            "volcano",
            "vc-job-0",
            &[("worker", &[("huawei.com/Ascend910", &["Ascend910-3"])])],
        ),
        // Not an NPU.
        pr_pod(
            "ml",
            "cpu-only",
            &[("main", &[("example.com/fpga", &["fpga-0"])])],
        ),
    ]);
    let api = FakeApi::start();
    api.add_pod(api_pod(
        "volcano",
        "vc-job-0",
        "11111111-2222-3333-4444-555555555555",
        "n1",
        &[("huawei.com/AscendReal", "Ascend910-6,Ascend910-7")],
        &[("worker", Some("huawei.com/Ascend910"), None)],
    ));
    api.add_pod(api_pod(
        "ml",
        "train-0",
        "22222222-2222-3333-4444-555555555555",
        "n1",
        &[],
        &[("main", Some("huawei.com/Ascend910"), None)],
    ));
    // On another node: listing pods without the node's field selector would attribute
    // chip 9 to it.
    api.add_pod(api_pod(
        "ml",
        "elsewhere",
        "33333333-2222-3333-4444-555555555555",
        "n2",
        &[("huawei.com/AscendReal", "Ascend910-9")],
        &[("main", Some("huawei.com/Ascend910"), None)],
    ));
    (kubelet, api)
}

/// The daemon tests' configuration. The memory group stays off: it reads the fake's NPU
/// processes, whose cgroups are not on this host, so the cgroup source would come into use
/// and fail from the group's first pass on, and `hcclwatch_pod_attribution_up` would
/// read 1 or 0 depending on whether that pass came before the scrape.
fn daemon_config(kubelet: &Path, kubeconfig: &Path) -> String {
    fake_config(&format!(
        r#"
[collectors]
memory = false
[attribution]
pod_resources_socket = "{}"
interval = "1s"
deadline = "500ms"
kubeconfig = "{}"
node_name = "n1"
"#,
        kubelet.display(),
        kubeconfig.display()
    ))
}

/// The `hcclwatch_npu_temperature_celsius` line of NPU `npu` in a scrape.
fn temperature<'a>(scrape: &'a str, npu: &str) -> Option<&'a str> {
    let label = format!("npu=\"{npu}\"");
    scrape
        .lines()
        .find(|l| l.starts_with("hcclwatch_npu_temperature_celsius{") && l.contains(&label))
}

#[test]
fn daemon_attributes_npus_from_kubelet_vnpus_and_volcano() {
    let (kubelet, api) = cluster();
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    let (cfg, scenario) = (daemon_config(&kubelet.socket, &kc), scenario_16());
    let mut start = Start::new(&cfg).scenario(&scenario);
    start.env.push(("HCCLWATCH_WEB_POD_LABELS", "true".into()));
    let d = Daemon::start(start);
    // The NPU part is published group by group (inventory first, sensors later), so the
    // temperature series asserted on below are waited for too, not only the inventory.
    let s = d.wait_for(
        "attribution from both sources, and the NPUs' temperatures",
        Duration::from_secs(20),
        |s| {
            s.contains("hcclwatch_pod_attribution_source_up{source=\"kubernetes_api\"} 1")
                && s.contains("vc-job-0")
                && ["0", "2", "3", "5", "6"]
                    .iter()
                    .all(|npu| temperature(s, npu).is_some())
        },
    );
    assert_eq!(
        allocations(&s),
        set(&[
            ("0", "ml/train-0", "main"),
            ("1", "ml/train-0", "main"),
            ("2", "ml/infer-a", "srv"),
            ("2", "ml/infer-b", "srv"),
            ("6", "volcano/vc-job-0", "worker"),
            ("7", "volcano/vc-job-0", "worker"),
        ]),
        "\n{s}"
    );
    assert_eq!(
        samples(
            &s,
            "hcclwatch_npu_allocation_info",
            &[("npu", "0"), ("uuid", &scenario_uuid(0))]
        ),
        vec![1.0]
    );
    assert_eq!(
        common::value(&s, "hcclwatch_pod_attribution_up", &[]),
        Some(1.0)
    );
    assert_eq!(
        common::value(
            &s,
            "hcclwatch_pod_attribution_source_up",
            &[("source", "pod_resources")]
        ),
        Some(1.0)
    );
    // The daemon asked for this node's pods only.
    let lists = api.pod_lists();
    assert!(
        !lists.is_empty()
            && lists
                .iter()
                .all(|q| q.contains("fieldSelector=spec.nodeName%3Dn1")),
        "{lists:?}"
    );
    // web.pod_labels: a chip with one pod carries it on its own series; a shared chip and
    // an idle chip carry none; no label is ever empty.
    let temp = |npu: &str| temperature(&s, npu).unwrap().to_string();
    assert!(
        temp("0").contains("namespace=\"ml\",pod=\"train-0\",container=\"main\""),
        "{}",
        temp("0")
    );
    assert!(temp("6").contains("pod=\"vc-job-0\""), "{}", temp("6"));
    for npu in ["2", "3", "5"] {
        assert!(!temp(npu).contains("pod="), "{}", temp(npu));
    }
    assert!(!s.contains("=\"\""), "an empty label value:\n{s}");
}

#[test]
fn a_failing_source_is_withheld_with_its_reason_and_never_blocks_a_scrape() {
    let (kubelet, api) = cluster();
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    let (cfg, scenario) = (daemon_config(&kubelet.socket, &kc), scenario_16());
    let d = Daemon::start(Start::new(&cfg).scenario(&scenario));
    d.wait_for("attribution up", Duration::from_secs(20), |s| {
        s.contains("hcclwatch_pod_attribution_up 1") && s.contains("train-0")
    });

    kubelet.set(|k| k.fail = Some(tonic::Code::Unavailable));
    let s = d.wait_for("pod-resources failing", Duration::from_secs(10), |s| {
        s.contains("hcclwatch_pod_attribution_source_up{source=\"pod_resources\"} 0")
    });
    assert!(s.contains("hcclwatch_pod_attribution_up 0"), "{s}");
    // What pod-resources said is withheld; what the API said stays.
    assert_eq!(
        allocations(&s),
        set(&[
            ("6", "volcano/vc-job-0", "worker"),
            ("7", "volcano/vc-job-0", "worker"),
        ])
    );
    assert!(
        d.log().contains("pod attribution: source failing")
            && d.log().contains("the kubelet stand-in was told to fail"),
        "{}",
        d.log()
    );

    // A kubelet that never answers: the pass gives up at the deadline, and scrapes are
    // served from the snapshot meanwhile, pass after pass: each scrape follows the stand-in
    // taking in one more call that it holds.
    kubelet.set(|k| {
        k.fail = None;
        k.hang = Some(Duration::from_secs(30));
    });
    for pass in 1..=3 {
        kubelet.wait_hung(pass, Duration::from_secs(10));
        let t0 = Instant::now();
        d.scrape();
        assert!(
            t0.elapsed() < Duration::from_millis(500),
            "{:?}",
            t0.elapsed()
        );
    }
    d.wait_for("deadline named in the log", Duration::from_secs(10), |_| {
        d.log().contains("did not answer within 500ms")
    });

    // RBAC taken away: the API source fails with the server's reason.
    api.deny("list", "pods");
    kubelet.set(|k| k.hang = None);
    let s = d.wait_for("API forbidden", Duration::from_secs(10), |s| {
        s.contains("hcclwatch_pod_attribution_source_up{source=\"kubernetes_api\"} 0")
            && s.contains("hcclwatch_pod_attribution_source_up{source=\"pod_resources\"} 1")
    });
    // Without the annotation, kubelet's own (Volcano-internal) ID is all that is known.
    assert!(allocations(&s).contains(&("3".into(), "volcano/vc-job-0".into(), "worker".into())));
    assert!(d.log().contains("forbidden"), "{}", d.log());
}

#[test]
fn outside_kubernetes_there_is_no_attribution_series_and_one_log_line_per_source() {
    let dir = tempfile::tempdir().unwrap();
    let absent = dir.path().join("absent.sock");
    let cfg = fake_config(&format!(
        "\n[attribution]\npod_resources_socket = \"{}\"\ninterval = \"1s\"\ndeadline = \"500ms\"\nkubernetes_api = false\n",
        absent.display()
    ));
    let scenario = scenario_16();
    let d = Daemon::start(Start::new(&cfg).scenario(&scenario));
    // The idle line closes the daemon's first attribution pass.
    d.wait_for(
        "the first attribution pass",
        Duration::from_secs(10),
        |_| d.log().contains("pod attribution idle"),
    );
    let s = d.wait_for("NPU series", Duration::from_secs(10), |s| {
        s.contains("hcclwatch_npu_temperature_celsius")
    });
    assert!(!s.contains("attribution"), "{s}");
    assert!(!s.contains("allocation_info"), "{s}");
    let log = d.log();
    assert_eq!(
        log.matches("no kubelet pod-resources socket at").count(),
        1,
        "{log}"
    );
    assert_eq!(log.matches("pod attribution idle").count(), 1, "{log}");

    // Later passes say nothing more. The daemon's passes give no sign of having run, so
    // the poller it runs is driven here for three of them, with its log captured.
    let proc = tempfile::tempdir().unwrap();
    let npu = npu_with(&[]);
    let (log, answers) = captured_log(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut p = Poller::new(settings(&absent, None, proc.path()));
        (0..3)
            .map(|_| rt.block_on(p.pass(&npu)))
            .collect::<Vec<_>>()
    });
    assert!(answers.iter().all(Option::is_none), "{answers:?}");
    assert_eq!(
        log.matches("no kubelet pod-resources socket at").count(),
        1,
        "{log}"
    );
    assert_eq!(log.matches("pod attribution idle").count(), 1, "{log}");
}

/// A `Write` into a shared buffer, for capturing a subscriber's output.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `f` with this thread's log events written to a buffer; returns the log and `f`'s
/// result.
fn captured_log<T>(f: impl FnOnce() -> T) -> (String, T) {
    let buf = LogBuffer::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let log = String::from_utf8_lossy(&buf.0.lock().unwrap()).into_owned();
    (log, out)
}

// ---- processes: the poller driven directly with the NPU part DCMI would produce ----

const U_TRAIN: &str = "0f6d2c4a-1b2e-4c3d-9e8f-a1b2c3d4e5f6";
const U_INFER: &str = "7a8b9c0d-1e2f-4a5b-8c7d-6e5f4a3b2c1d";
const U_GHOST: &str = "99999999-8888-4777-8666-555555555555";
const ID_A: &str = "4f1c7e2a9b3d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7";
const ID_B: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const ID_C: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

/// A fake host `/proc` with the cgroup files of five PIDs (one of which has exited).
fn proc_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let write = |pid: u32, text: String| {
        std::fs::create_dir(dir.path().join(pid.to_string())).unwrap();
        std::fs::write(dir.path().join(format!("{pid}/cgroup")), text).unwrap();
    };
    let train = U_TRAIN.replace('-', "_");
    let infer = U_INFER.replace('-', "_");
    // cgroup v2, systemd driver, containerd.
    write(
        1001,
        format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{train}.slice/cri-containerd-{ID_A}.scope\n"
        ),
    );
    // cgroup v1, systemd driver, CRI-O.
    write(
        1002,
        format!(
            "12:pids:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{infer}.slice/crio-{ID_B}.scope\n\
             4:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{infer}.slice/crio-{ID_B}.scope\n\
             1:name=systemd:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{infer}.slice/crio-{ID_B}.scope\n"
        ),
    );
    // A host process.
    write(1003, "0::/system.slice/sshd.service\n".into());
    // 1004 has exited. 1005: cgroup v1, cgroupfs driver, a pod the API does not know.
    write(
        1005,
        format!("11:cpu,cpuacct:/kubepods/besteffort/pod{U_GHOST}/{ID_C}\n0::/\n"),
    );
    dir
}

/// Chips 0..3 with the processes DCMI would list on them.
fn npu_with(processes: &[(u32, &[u32])]) -> NpuSnapshot {
    let mut npu = NpuSnapshot::default();
    for phy in 0..4 {
        let procs = processes.iter().find(|(p, _)| *p == phy).map(|(_, pids)| {
            pids.iter()
                .map(|pid| NpuProcess {
                    pid: *pid,
                    memory_bytes: 1 << 30,
                })
                .collect()
        });
        npu.state.chips.insert(
            phy,
            ChipReadings {
                address: ChipAddress {
                    phy,
                    logic: phy,
                    ..ChipAddress::default()
                },
                processes: procs,
                ..ChipReadings::default()
            },
        );
    }
    npu
}

fn settings(kubelet: &Path, kubeconfig: Option<&Path>, proc_root: &Path) -> Settings {
    Settings {
        socket: kubelet.to_path_buf(),
        prefixes: vec!["huawei.com/Ascend910".into()],
        interval: Duration::from_secs(1),
        deadline: Duration::from_secs(2),
        kubernetes_api: kubeconfig.is_some(),
        kubeconfig: kubeconfig.map(Path::to_path_buf),
        node: "n1".into(),
        proc_root: proc_root.to_path_buf(),
        pod_labels: false,
    }
}

fn pass(s: Settings, npu: &NpuSnapshot) -> Option<AttributionSnapshot> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut p = Poller::new(s);
    rt.block_on(p.pass(npu))
}

fn process_cluster() -> (FakeKubelet, FakeApi) {
    // The training pod holds chip 0 by allocation; the inference pod is privileged and
    // holds nothing, yet runs on chip 1.
    let kubelet = FakeKubelet::start(vec![pr_pod(
        "ml",
        "train-0",
        &[("main", &[("huawei.com/Ascend910", &["Ascend910-0"])])],
    )]);
    let api = FakeApi::start();
    api.add_pod(api_pod(
        "ml",
        "train-0",
        U_TRAIN,
        "n1",
        &[],
        &[(
            "main",
            Some("huawei.com/Ascend910"),
            Some(&format!("containerd://{ID_A}")),
        )],
    ));
    api.add_pod(api_pod(
        "ml",
        "infer",
        U_INFER,
        "n1",
        &[],
        &[("srv", None, Some(&format!("cri-o://{ID_B}")))],
    ));
    (kubelet, api)
}

#[test]
fn npu_processes_map_to_pods_through_their_cgroups() {
    let (kubelet, api) = process_cluster();
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    let proc = proc_tree();
    let npu = npu_with(&[(0, &[1001, 1003]), (1, &[1002, 1004]), (2, &[1005])]);
    let a = pass(settings(&kubelet.socket, Some(&kc), proc.path()), &npu).unwrap();

    assert!(a.up(), "{:?}", a.sources);
    assert_eq!(a.sources.len(), 3);
    let u0 = &a.users[&0];
    assert_eq!(u0.len(), 1, "{u0:#?}");
    assert_eq!(u0[0].pod.name.as_ref().unwrap().name, "train-0");
    assert_eq!(u0[0].container.as_deref(), Some("main"));
    assert_eq!(
        u0[0].evidence,
        BTreeSet::from([Evidence::PodResources, Evidence::Process])
    );
    assert_eq!(u0[0].pids, BTreeSet::from([1001]));
    let u1 = &a.users[&1];
    assert_eq!(u1[0].pod.name.as_ref().unwrap().name, "infer");
    assert_eq!(u1[0].container.as_deref(), Some("srv"));
    assert_eq!(u1[0].evidence, BTreeSet::from([Evidence::Process]));
    let u2 = &a.users[&2];
    assert_eq!(u2[0].pod.name, None);
    assert_eq!(u2[0].pod.uid.as_deref(), Some(U_GHOST));

    let owners: Vec<(u32, u32, Option<&str>, Option<&str>)> = a
        .processes
        .iter()
        .map(|p| {
            (
                p.npu,
                p.pid,
                p.container_id.as_deref(),
                p.container.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        owners,
        vec![
            (0, 1001, Some(ID_A), Some("main")),
            (1, 1002, Some(ID_B), Some("srv")),
            (2, 1005, Some(ID_C), None),
        ]
    );

    // Exported: the named pods in the allocation family; the process family names the
    // unknown pod by UID and container ID only.
    let store = Arc::new(hcclwatch::snapshot::Store::new(false, false));
    store.publish_npu(npu);
    store.publish_attribution(a);
    let text = hcclwatch::export::prometheus::encode(
        &hcclwatch::export::prometheus::registry(
            store,
            hcclwatch::snapshot::status::BuildInfo::current(),
        ),
        hcclwatch::export::prometheus::Format::Text004,
    )
    .unwrap();
    assert_eq!(
        allocations(&text),
        set(&[("0", "ml/train-0", "main"), ("1", "ml/infer", "srv")])
    );
    let ghost: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("hcclwatch_npu_process_container_info{") && l.contains("pid=\"1005\"")
        })
        .collect();
    assert_eq!(ghost.len(), 1, "{text}");
    assert!(
        ghost[0].contains(&format!("pod_uid=\"{U_GHOST}\"")),
        "{}",
        ghost[0]
    );
    assert!(
        ghost[0].contains(&format!("container_id=\"{ID_C}\"")),
        "{}",
        ghost[0]
    );
    assert!(!ghost[0].contains("namespace="), "{}", ghost[0]);
    // (The test's chips have no identity, so the NPU collector's uuid label is empty on
    // its series; the attribution families must not have a single empty value.)
    for l in text.lines().filter(|l| {
        l.starts_with("hcclwatch_npu_allocation_info")
            || l.starts_with("hcclwatch_npu_process_container_info")
    }) {
        assert!(!l.contains("=\"\""), "{l}");
    }
}

#[test]
fn without_the_api_processes_are_known_by_pod_uid_and_container_id() {
    let (kubelet, _api) = process_cluster();
    let proc = proc_tree();
    let npu = npu_with(&[(0, &[1001]), (1, &[1002])]);
    let a = pass(settings(&kubelet.socket, None, proc.path()), &npu).unwrap();
    assert!(a.up());
    assert!(!a.sources.contains_key(&Source::KubernetesApi));
    // Chip 0: the allocated pod by name, and its process's pod by UID (hcclwatch cannot
    // tell, without the API, that they are the same pod).
    let names: BTreeSet<Option<String>> = a.users[&0]
        .iter()
        .map(|u| u.pod.name.as_ref().map(|n| n.name.clone()))
        .collect();
    assert_eq!(names, BTreeSet::from([Some("train-0".to_string()), None]));
    assert!(
        a.sole_pod(0).is_none(),
        "an unnamed user may be another pod"
    );
    let p = a.processes.iter().find(|p| p.pid == 1002).unwrap();
    assert_eq!(p.pod.uid.as_deref(), Some(U_INFER));
    assert_eq!(p.container_id.as_deref(), Some(ID_B));
    assert_eq!((p.pod.name.as_ref(), p.container.as_deref()), (None, None));
}

#[test]
fn processes_invisible_under_proc_point_at_the_host_pid_namespace() {
    let kubelet = FakeKubelet::start(vec![]);
    let empty = tempfile::tempdir().unwrap();
    let npu = npu_with(&[(0, &[1001]), (3, &[1002])]);
    let a = pass(settings(&kubelet.socket, None, empty.path()), &npu).unwrap();
    assert!(!a.up());
    let cg = &a.sources[&Source::Cgroup];
    assert!(!cg.ok);
    assert!(cg.error.as_deref().unwrap().contains("hostPID"), "{cg:?}");
    assert!(a.sources[&Source::PodResources].ok);
}

#[test]
fn deploy_mounts_the_kubelet_socket_read_only_shares_host_pids_and_reads_pods_only() {
    let out = std::process::Command::new("kubectl")
        .args(["kustomize", "deploy/kubernetes"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("kubectl (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_slice(&out.stdout)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    let pod = &find("DaemonSet", "hcclwatch")["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"], true);
    assert_eq!(pod["automountServiceAccountToken"], true);
    let c = &pod["containers"][0];
    let mount = c["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == "/var/lib/kubelet/pod-resources")
        .expect("pod-resources mounted");
    assert_eq!(mount["readOnly"], true);
    let vol = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert_eq!(vol["hostPath"]["path"], "/var/lib/kubelet/pod-resources");
    // Read-only RBAC: get and list pods, nothing else, bound to the daemon's account.
    let role = find("ClusterRole", "hcclwatch-pod-reader");
    let rules = role["rules"].as_sequence().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0]["resources"],
        serde_yaml::to_value(["pods"]).unwrap()
    );
    assert_eq!(
        rules[0]["verbs"],
        serde_yaml::to_value(["get", "list"]).unwrap()
    );
    let binding = find("ClusterRoleBinding", "hcclwatch-pod-reader");
    assert_eq!(binding["roleRef"]["name"], "hcclwatch-pod-reader");
    assert_eq!(binding["subjects"][0]["name"], "hcclwatch");
    assert_eq!(binding["subjects"][0]["namespace"], "hcclwatch");
}
