#!/usr/bin/env python3
"""Writes the seed corpus: a few hand-made inputs per fuzz target, taken from the unit
tests and the formats' documentation (docs/fuzzing.md). Run from anywhere; it rewrites
fuzz/seeds/. The binary seeds are built here so that what they contain is readable."""

import json
import os
import shutil
import struct

ROOT = os.path.dirname(os.path.abspath(__file__))
SEEDS = os.path.join(ROOT, "seeds")
REPO = os.path.dirname(ROOT)


def put(target, name, data):
    d = os.path.join(SEEDS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def u64s(*ws):
    return b"".join(struct.pack("<Q", w & (2**64 - 1)) for w in ws)


def f64s(*xs, order="<"):
    return b"".join(struct.pack(order + "d", x) for x in xs)


# --- frame_header: magic "HCWT", version 2, kind, dtype, reserved, comm, seq, len, chunk.
def header(kind, dtype=4, comm=7, seq=3, length=16, chunk=0, version=2):
    return struct.pack("<IBBBBQQII", 0x54574348, version, kind, dtype, 0, comm, seq, length, chunk)


put("frame_header", "control", header(3) + header(3) + struct.pack("<I", 1 << 20))
put("frame_header", "data_vs_control", header(1) + header(3) + struct.pack("<I", 1 << 20))
put("frame_header", "too_large", header(4, length=1 << 30) + header(4, length=1 << 30) + struct.pack("<I", 1 << 20))
put("frame_header", "abort", header(2, dtype=0, length=1024))
put("frame_header", "old_version", header(3, version=1))

# --- handshake: "HCWC" comm rank channel nonce proof, and "HCWA" nonce.
connect = b"HCWC" + struct.pack("<QII", 7, 3, 1) + bytes([2] * 32) + bytes(range(32))
put("handshake", "connect", connect)
put("handshake", "connect_other_comm", b"HCWC" + struct.pack("<QII", 8, 3, 1) + bytes(64))
put("handshake", "acceptor_hello", b"HCWA" + bytes([1] * 32))
put("handshake", "refusal", b"NO\0\0")
put("handshake", "short", connect[:40])


# --- health_restore: one byte of node count (n = 1 + b % 16), then the JSON snapshot.
def track(state="Healthy", since=0, out_hist=(), in_hist=()):
    return {
        "state": state, "out_hist": [list(x) for x in out_hist],
        "in_hist": [list(x) for x in in_hist], "below": 0, "above": 0,
        "since": since, "confirm_pending": False, "confirmations": 0,
    }


def snapshot(nodes, round_=0, baseline=None, fabric=(), links=(), held=()):
    return json.dumps({
        "nodes": nodes, "round": round_, "baseline": baseline,
        "fabric_hist": list(fabric), "links": [[list(k), list(v)] for k, v in links],
        "held": [list(h) for h in held],
    }, separators=(",", ":"))


put("health_restore", "fresh_4", bytes([3]) + snapshot([track()] * 4).encode())
put("health_restore", "suspect_4", bytes([3]) + snapshot(
    [track("Suspect", 12, [(0.3, 5.0)] * 3, [(0.2, 4.0)]), track(), track(), track()],
    round_=20, baseline=-6.9, fabric=[False, True], links=[((0, 1), [0.4, 0.5])], held=[(0, 1)],
).encode())
put("health_restore", "probation_3", bytes([2]) + snapshot(
    [track("Probation", 30), track("QuarantineRecommended", 25), track("Confirmed", 28)],
    round_=40, baseline=-7.0,
).encode())
put("health_restore", "other_group", bytes([1]) + snapshot([track()] * 5).encode())
put("health_restore", "not_json", bytes([3]) + b"{not json")
# Found by fuzzing: a held link from a node to itself was taken, remembered as a link
# found, and written into a snapshot the engine then refused.
put("health_restore", "regression-held-self-pair", bytes([3]) + snapshot(
    [track("Suspect", 12, [(0.3, 5.0)] * 3, [(0.2, 4.0)]), track(), track(), track()],
    round_=20, baseline=-6.9, fabric=[False, True], links=[((0, 1), [0.4, 0.5])], held=[(0, 0)],
).encode())

# --- probe_plan: two bytes of group size (% 1024), then the plan's words: round,
# limited, pair count, confirmation count, then the pairs, then the device plane's spacing.
def plan(size, round_, limited, pairs, n_confirm, device_every=1):
    words = [round_, int(limited), len(pairs), n_confirm]
    for a, b in pairs:
        words += [a, b]
    words += [0] * (4 + 2 * 64 - len(words))
    words.append(device_every)
    return struct.pack("<H", size) + u64s(*words)


put("probe_plan", "from_the_test", plan(5, 1 << 40, True, [(0, 3), (2, 1), (1, 4)], 2, 2))
put("probe_plan", "device_every_huge", plan(3, 9, False, [(0, 1)], 1, 1 << 63))
put("probe_plan", "outside_group", plan(4, 7, False, [(0, 3), (2, 1), (1, 4), (3, 3)], 4))
put("probe_plan", "too_many_pairs", plan(2, 1, False, [(0, 1)] * 64, 100))
put("probe_plan", "junk", struct.pack("<H", 8) + b"\xff" * 17)

# --- gather_rows: one byte of row width (% 81), then the rows (native f64: x86-64 is
# little-endian). A row: wait, latency, link, ring, hard, over budget, rtt, uplink
# congested, confirmations.
nan = float("nan")
put("gather_rows", "two_members_two_pairs", bytes([10]) + f64s(
    1e-4, 2e-5, 3e-4, nan, 0, 0, 5e-5, 0, nan, 4e-4,
    2e-4, 2e-5, 9e-4, nan, 3, 1, 5e-5, 1, 8e-4, nan))
put("gather_rows", "fixed_only", bytes([8]) + f64s(0.0, 1e-5, 1e-4, 2e-3, 0, 0, 3e-5, 1))
put("gather_rows", "odd_values", bytes([8]) + f64s(-1.0, float("inf"), nan, 0.0, 300.0, -0.0, 1e300, nan))
put("gather_rows", "short_width", bytes([3]) + f64s(1.0, 2.0, 3.0, 4.0))

# --- probe_row: one byte choosing the wire version (2 + byte % 3), then one row (f64,
# little-endian). From version 3 a row starts with its version and its fixed-field count.
fixed = (1e-4, 2e-5, 3e-4, nan, 0, 0, 5e-5, 1)
put("probe_row", "v2_bare", bytes([0]) + f64s(*fixed, 4e-4))
put("probe_row", "v3_layout", bytes([1]) + f64s(3, 8, *fixed, 4e-4, nan))
put("probe_row", "v4_more_fields", bytes([2]) + f64s(4, 10, *fixed, 7.0, 8.0, 4e-4))
put("probe_row", "v3_fewer_fields", bytes([1]) + f64s(3, 6, *fixed[:6], 4e-4))
put("probe_row", "v3_oversize", bytes([1]) + f64s(3, 200, 1.0, 2.0))
put("probe_row", "v3_garbage_layout", bytes([1]) + f64s(nan, -1.0, *fixed))


# --- port_table: one byte of member count (% 9), that many candidate indices, then
# each member's 16 words of (phy + 1) << 32 | ipv4.
def ports(local):
    words = [((phy + 1) << 32) | ip for phy, ip in sorted(local)][:16]
    return u64s(*(words + [0] * (16 - len(words))))


def ip4(a, b, c, d):
    return (a << 24) | (b << 16) | (c << 8) | d


put("port_table", "two_members", bytes([2, 3, 7]) + ports([(1, ip4(10, 0, 0, 2)), (0, ip4(10, 0, 0, 1))]) + ports([(0, ip4(10, 0, 1, 1))]))
put("port_table", "duplicates", bytes([2, 0, 1]) + ports([(0, ip4(10, 0, 0, 1)), (0, ip4(10, 0, 0, 9))]) + ports([(2, ip4(10, 0, 0, 1)), (3, ip4(10, 0, 0, 3))]))
put("port_table", "eight_npus", bytes([1, 0]) + ports([(i, ip4(192, 168, 1, 8 + i)) for i in range(8)]))
put("port_table", "junk", bytes([1, 0]) + b"\xff" * 128)


# --- ping_rows: port count (% 33), reporter node (% 5), each port's owner byte (% 4),
# then pings of six little-endian f64: src, dst, kind, sent, received, rtt.
def pings(owners, reporter, *rows):
    return bytes([len(owners), reporter]) + bytes(owners) + b"".join(f64s(*r) for r in rows)


put("ping_rows", "plan_and_reping", pings([0, 0, 1, 1], 0, (0, 2, 0, 3, 3, 1.2e-4), (1, 3, 1, 3, 2, 9e-5), (0, 1, 0, 3, 0, nan)))
put("ping_rows", "foreign_port", pings([0, 1], 0, (1, 0, 0, 3, 3, 1e-4)))
put("ping_rows", "implausible", pings([0, 1, 2], 0, (0, 1, 0, 17, 3, 1e-4), (0, 2, 0, 3, 4, 1e-4), (0, 1, 0, 3, 3, 61.0), (0, 0, 0, 3, 3, 1e-4), (-1, 1, 0, 3, 3, 1e-4)))

# --- rank_table: the formats as the unit tests and docs/engine.md write them.
V1 = """{ "status":"completed", "version":"1.0", "server_count":"2",
  "server_list":[
    {"server_id":"node_0","host_ip":"10.0.0.1","device":[
      {"device_id":"0","device_ip":"192.168.1.8","rank_id":"0"},
      {"device_id":"1","device_ip":"192.168.1.9","rank_id":"1"}]},
    {"server_id":"node_1","device":[
      {"device_id":"0","device_ip":"192.168.2.8","rank_id":"2"},
      {"device_id":"1","device_ip":"192.168.2.9","rank_id":"3","host_port":"61000"}]}]}
"""
put("rank_table", "v1_0", V1)
put("rank_table", "v1_2", V1.replace('"1.0"', '"1.2"').replace('"status"', '"super_pod_list":[{"super_pod_id":"0","server_list":[{"server_id":"node_0"}]}],"status"'))
put("rank_table", "v2_0", """{"version":"2.0","rank_count":2,"rank_list":[
  {"rank_id":0,"local_id":0,"device_id":0,"host_port":60001,"level_list":[{"net_layer":0,"net_instance_id":"az0-rack0","net_type":"CLOS","net_attr":"","rank_addr_list":[{"addr_type":"IPV4","addr":"10.1.0.1","ports":["0/4"],"plane_id":"plane0"}]}]},
  {"rank_id":1,"local_id":1,"device_id":1,"level_list":[{"net_layer":0,"net_instance_id":"az0-rack0","net_type":"CLOS","net_attr":"","rank_addr_list":[{"addr_type":"IPV6","addr":"fd00::2","ports":["0/5"],"plane_id":"plane0"}]}]}]}
""")
put("rank_table", "interleaved", """{"version":"1.0","server_list":[
  {"server_id":"a","device":[{"device_id":"0","device_ip":"10.0.0.1","rank_id":"0"},{"device_id":"1","device_ip":"10.0.0.2","rank_id":"2"}]},
  {"server_id":"b","device":[{"device_id":"0","device_ip":"10.0.1.1","rank_id":"1"},{"device_id":"1","device_ip":"10.0.1.2","rank_id":"3"}]}]}
""")
put("rank_table", "out_of_range", V1.replace('"host_port":"61000"', '"host_port":"70000"').replace('"rank_id":"2"', '"rank_id":"4294967296"'))

# --- config: the shipped configurations, and overrides.
for name, path in [("systemd", "deploy/systemd/hcclwatch.toml"), ("kubernetes", "deploy/kubernetes/hcclwatch.toml"), ("sim", "deploy/config/sim.toml"), ("every_key", "deploy/config/hcclwatch.toml")]:
    with open(os.path.join(REPO, path)) as f:
        put("config", name, f.read())
put("config", "env_overrides", """#env HCCLWATCH_LOG_LEVEL=debug
#env HCCLWATCH_PROBE_INTERVAL=5s
[probe]
enabled = true
interval = "10s"

[collective]
peers = ["10.0.0.1:60100", "10.0.0.2:60100"]
""")
put("config", "problems", """[web]
listen_address = "0.0.0.0:99999"
telemetry_path = "/-/ready"

[probe]
interval = "-1s"
unknown_key = 3
""")

# --- webhook_payload: Alertmanager's version-4 body.
def alert(name, node, fp, status="firing"):
    return {"status": status, "labels": {"alertname": name, "node": node, "severity": "critical"},
            "annotations": {"summary": "s"}, "startsAt": "2026-11-29T00:00:00Z",
            "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://prometheus/graph", "fingerprint": fp}


def body(alerts, version="4", status="firing"):
    return json.dumps({"version": version, "groupKey": "{}:{alertname=\"HcclwatchQuarantineRecommended\"}",
                       "truncatedAlerts": 0, "status": status, "receiver": "hcclwatch-remediate",
                       "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
                       "externalURL": "http://alertmanager:9093", "alerts": alerts})


put("webhook_payload", "firing", body([alert("HcclwatchQuarantineRecommended", "npu-node-1", "a1b2c3d4e5f60718")]))
put("webhook_payload", "resolved_two", body([alert("HcclwatchQuarantineRecommended", "npu-node-1", "a1b2", "resolved"), alert("HcclwatchNpuHealthCritical", "ip-10-0-0-1.ec2.internal", "ff00")], status="resolved"))
put("webhook_payload", "bad_node", body([alert("HcclwatchQuarantineRecommended", "Bad_Node", "a1")]))
put("webhook_payload", "version_3", body([], version="3"))

# --- hccn_parse: hccn_tool's output, as the parser tests capture it.
put("hccn_parse", "link_speed", "link status: UP\nSpeed: 200000 Mb/s\nnet health status: Success\n")
put("hccn_parse", "link_stat", """[devid 0]current time        : Tue Oct 28 21:46:46 2025
[devid 0]link up count       : 2
[devid 0]link down count     : 1
[devid 0]link change records :
[devid 0]    Sun Oct  5 10:13:51 2025    LINK UP
[devid 0]    Sun Oct  5 10:13:50 2025    LINK DOWN
[devid 0]    Sun Oct  5 10:13:35 2025    LINK UP
""")
put("hccn_parse", "ip_vnic", "ipaddr:10.0.0.1\nnetmask:255.255.0.0\nipaddr:10.0.1.1\nnetmask:255.255.0.0\nvnic link status: UP\nvnic ipaddr: 192.168.2.199\nvnic netmask: 255.255.255.0\n")
put("hccn_parse", "optical", """optical info:
present              : present
temperature          : 47 C
vendor name          : HUAWEI
Vcc                  : 3262.90 mV
Tx Power0            : 4.4035 mW
Rx Power0            : 1.2500 mW
Tx Power1            : 4.0000 mW
Rx Power1            : 0.0100 mW
Tx Power2            : NA
Rx Power2            : NA
Host SNR Lane0       : not supported
""")
put("hccn_parse", "stat", "packet statistics:\nmac_tx_mac_pause_num:7\nmac_rx_mac_pause_num:1007\nroce_rx_err_pkt_num:0\nnic_rx_all_oct_num:123456789\n")
put("hccn_parse", "ping", """device 0 PING 10.10.100.10
recv time out seq=0
recv seq=1,time=0.097000ms
recv seq=2,time=0.066000ms
3 packets transmitted, 2 received, 33.33% packet loss
""")
put("hccn_parse", "ping_unreachable", "device 0 PING 10.0.0.9\nFrom 10.0.0.1 icmp_seq=1 Destination Host Unreachable\n3 packets transmitted, 0 received, 100.00% packet loss\n")

# --- dcmi_convert: raw words (low half: i32 temperature/power, high half: u32
# voltage/clock), then HCCS bandwidths (f64 bits) doubling as (logical, physical) pairs.
put("dcmi_convert", "typical", u64s((1800 << 32) | 65) + f64s(56.0, 0.0, 999.9))
put("dcmi_convert", "sentinels", u64s(0xFFFF_FFFF_FFFF_FFFF) + f64s(float("inf"), nan, -1.0, 1001.0))
put("dcmi_convert", "markers", u64s((0x7FFF << 32) | 0x7FFD) + u64s((5 << 32) | 5, (5 << 32) | 6))
put("dcmi_convert", "edges", u64s(((10000 + 1) << 32) | (2**32 - 41)) + u64s((3 << 32) | 1, (3 << 32) | 2, (4 << 32) | 3))

# --- web_config: the exporter-toolkit YAML.
put("web_config", "empty", "")
put("web_config", "basic_auth_rate_limit", """basic_auth_users:
  alice: $2b$04$abcdefghijklmnopqrstuuABCDEFGHIJKLMNOPQRSTUVWXYZ01234
rate_limit:
  interval: 1s
  burst: 5
http_server_config:
  headers:
    X-Frame-Options: deny
""")
put("web_config", "every_problem", "tls_server_config:\n  cert_file: a.crt\n  client_auth_type: Sometimes\n  min_version: TLS10\n  client_allowed_sans: [x]\nbasic_auth_users:\n  alice: plaintext\nhttp_server_config:\n  http2: true\n")
# A throwaway self-signed P-256 certificate for localhost, made for this corpus with
# `openssl req -x509 -newkey ec`; its key protects nothing.
cert = """-----BEGIN CERTIFICATE-----
MIIBkzCCATmgAwIBAgIUbyPo+LmKjm9en13Wi4dmwqmf6+kwCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJbG9jYWxob3N0MB4XDTI2MTIwMTEwMjMwOVoXDTM2MTEyODEw
MjMwOVowFDESMBAGA1UEAwwJbG9jYWxob3N0MFkwEwYHKoZIzj0CAQYIKoZIzj0D
AQcDQgAEBRLHponPUtJj9cbjzQPa0078O9niyeTxAoQuXbgt3AkCSHGZETz8P94P
1G3ippZ8czj2WAtNWcF7tWjpe47muqNpMGcwHQYDVR0OBBYEFM/QrsprSIPic5g8
kKe9l5sCAGXqMB8GA1UdIwQYMBaAFM/QrsprSIPic5g8kKe9l5sCAGXqMA8GA1Ud
EwEB/wQFMAMBAf8wFAYDVR0RBA0wC4IJbG9jYWxob3N0MAoGCCqGSM49BAMCA0gA
MEUCICKtmCrlrtHkj5gOaBqNt0q7XSGtwJNkWQ5wf7GMkE7TAiEAhav8ULXMjB9a
qvpu23dIifH94kHgXi+AOn/iwmrwRew=
-----END CERTIFICATE-----"""
key = """-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgU7crqpIEBuNefglj
aurvh9jafk4Wldn6KQoSbupJAlShRANCAAQFEsemic9S0mP1xuPNA9rTTvw72eLJ
5PEChC5duC3cCQJIcZkRPPw/3g/UbeKmlnxzOPZYC01ZwXu1aOl7jua6
-----END PRIVATE KEY-----"""
indent = lambda s: "".join("    " + l + "\n" for l in s.strip().splitlines())
put("web_config", "inline_tls", "tls_server_config:\n  cert: |\n" + indent(cert) + "  key: |\n" + indent(key)
    + "  client_auth_type: NoClientCert\n  min_version: TLS12\n  max_version: TLS13\nhttp_server_config:\n  http2: true\n")

# --- identity_proof: one byte choosing raw (even) or overwrite (odd), then the proof, or
# (offset u16 LE, byte) triples written over the target's own valid proof.
put("identity_proof", "empty", bytes([0]))
put("identity_proof", "overwrite", bytes([1, 0, 0, 0, 5, 0, 7]))
put("identity_proof", "huge_length", bytes([0, 1, 0xff, 0xff, 0xff, 0xff]))
put("identity_proof", "unchanged", bytes([1]))
