#!/usr/bin/env python3
"""Writes the protobuf seeds of the runtime_hooks and runtime_proxy targets
(fuzz/corpus/<target>/pb-*): a few valid requests of the RuntimeHookService,
NRI and CRI APIs, hand-encoded (field numbers from apis/proto,
koordlet/proto/nri and koord-runtime-proxy/proto/cri). Run from fuzz/."""

import os
import struct


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def ld(field, payload):
    if isinstance(payload, str):
        payload = payload.encode()
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def num(field, value):
    return varint(field << 3) + varint(value)


def smap(field, entries):
    return b"".join(ld(field, ld(1, k) + ld(2, v)) for k, v in entries.items())


def write(target, name, data):
    os.makedirs(f"corpus/{target}", exist_ok=True)
    with open(f"corpus/{target}/pb-{name}", "wb") as f:
        f.write(data)


RESOURCE_STATUS = "scheduling.koordinator.sh/resource-status"
EXTENDED_SPEC = "node.koordinator.sh/extended-resource-spec"
QOS = "koordinator.sh/qosClass"
PRIORITY = "koordinator.sh/priority-class"

# --- RuntimeHookService (apis/proto/runtime/v1alpha1/api.proto)
def hook_resources(quota, shares, memory, cpuset=""):
    out = num(1, 100000) + num(2, quota) + num(3, shares) + num(4, memory)
    if cpuset:
        out += ld(6, cpuset)
    return out


def pod_meta(name, uid):
    return ld(1, name) + ld(2, uid) + ld(3, "default")


LSR = {QOS: "LSR"}
LSR_ANN = {RESOURCE_STATUS: '{"cpuset":"2-3"}'}
BE = {QOS: "BE", PRIORITY: "koord-batch"}
BE_ANN = {
    EXTENDED_SPEC: '{"containers":{"main":{"limits":{"kubernetes.io/batch-cpu":"1000",'
    '"kubernetes.io/batch-memory":"1Gi"},"requests":{"kubernetes.io/batch-cpu":"500",'
    '"kubernetes.io/batch-memory":"512Mi"}}}}',
    "node.koordinator.sh/resctrl": '{"llc":{"schemata":{"range":[20,80]}},"mb":{"schemata":{"percent":90}}}',
}

pod_lsr = (
    ld(1, pod_meta("lsr", "uid-lsr"))
    + smap(3, LSR)
    + smap(4, LSR_ANN)
    + ld(5, "/kubepods/poduid-lsr")
    + ld(7, hook_resources(200000, 2048, 1 << 30))
)
pod_be = (
    ld(1, pod_meta("be", "uid-be"))
    + smap(3, BE)
    + smap(4, BE_ANN)
    + ld(5, "/kubepods/besteffort/poduid-be")
    + ld(7, hook_resources(-1, 2, 0))
)
pod_escape = ld(1, pod_meta("x", "../../etc")) + ld(5, "/kubepods/../../etc")


def container(pod_labels, pod_ann, parent, uid, name, resources):
    return (
        ld(1, pod_meta("p", uid))
        + ld(2, ld(1, name) + ld(3, "containerd://0123456789abcdef"))
        + smap(3, {"io.kubernetes.container.name": name})
        + ld(4, resources)
        + smap(6, pod_ann)
        + smap(7, pod_labels)
        + ld(8, parent)
        + smap(9, {"PATH": "/bin"})
    )


c_lsr = container(LSR, LSR_ANN, "/kubepods/poduid-lsr", "uid-lsr", "main", hook_resources(200000, 2048, 1 << 30, "0-7"))
c_be = container(BE, BE_ANN, "/kubepods/besteffort/poduid-be", "uid-be", "main", hook_resources(-1, 2, 0))

# runtime_hooks selectors 0-7 are the stages (0, 1, 7 pod-level), then a dispatcher digit.
for stage in range(8):
    pod_level = stage in (0, 1, 7)
    for dispatcher in "03":
        for label, body in (
            [("lsr", pod_lsr), ("be", pod_be), ("escape", pod_escape)]
            if pod_level
            else [("lsr", c_lsr), ("be", c_be)]
        ):
            if stage not in (0, 2, 6) and label != "be":
                continue
            write("runtime_hooks", f"stage{stage}-{dispatcher}-{label}", f"{stage}{dispatcher}".encode() + body)

# --- NRI (koordlet/proto/nri/api.proto), selector 8, then the method digit.
def optional(field, value):
    return ld(field, num(1, value))


nri_resources = ld(1, optional(1, 1 << 30)) + ld(2, optional(1, 1024) + optional(2, 200000) + optional(3, 100000) + ld(6, "0-7"))
nri_pod = (
    ld(1, "sandbox-be")
    + ld(2, "be")
    + ld(3, "uid-be")
    + ld(4, "default")
    + smap(5, BE)
    + smap(6, BE_ANN)
    + ld(8, ld(2, nri_resources) + ld(3, "/kubepods/besteffort/poduid-be"))
)
nri_container = (
    ld(1, "ctr-be")
    + ld(2, "sandbox-be")
    + ld(3, "main")
    + num(4, 3)
    + ld(8, "PATH=/bin")
    + ld(11, ld(3, nri_resources) + ld(5, "/kubepods/besteffort/poduid-be/ctr-be"))
)
nri = {
    "0-configure": ld(1, '{"events":["RunPodSandbox","CreateContainer"]}') + ld(2, "containerd") + ld(3, "1.7.0"),
    "1-synchronize": ld(1, nri_pod) + ld(2, nri_container),
    "2-create": ld(1, nri_pod) + ld(2, nri_container),
    "3-update": ld(1, nri_pod) + ld(2, nri_container) + ld(3, nri_resources),
    "5-statechange": num(1, 1) + ld(2, nri_pod),
}
for name, body in nri.items():
    write("runtime_hooks", f"nri-{name}", b"8" + name[0].encode() + body)

# selector 9: the socket bytes, multiplexer frames of ttrpc requests (ttrpc.proto).
def frame(conn, stream, payload):
    message = struct.pack(">IIBB", len(payload), stream, 1, 0) + payload
    return struct.pack(">II", conn, len(message)) + message


stream = b""
for index, (method, body) in enumerate(
    [("Configure", nri["0-configure"]), ("CreateContainer", nri["2-create"]), ("StateChange", nri["5-statechange"])]
):
    request = ld(1, "nri.pkg.api.v1alpha1.Plugin") + ld(2, method) + ld(3, body)
    stream += frame(1, 2 * index + 1, request)
write("runtime_hooks", "nri-socket", b"90" + stream)

# --- CRI (koord-runtime-proxy/proto/cri/api.proto)
def cri_resources(quota, shares, memory):
    return num(1, 100000) + num(2, quota) + num(3, shares) + num(4, memory)


sandbox_config = (
    ld(1, ld(1, "be") + ld(2, "uid-be") + ld(3, "default"))
    + smap(6, BE)
    + smap(7, BE_ANN)
    + ld(8, ld(1, "/kubepods/besteffort/poduid-be") + ld(5, cri_resources(-1, 2, 0)))
)
run_pod = ld(1, sandbox_config) + ld(2, "runc")
container_config = (
    ld(1, ld(1, "main"))
    + ld(2, ld(1, "busybox"))
    + ld(6, ld(1, "PATH") + ld(2, "/bin"))
    + smap(10, {"io.kubernetes.container.name": "main"})
    + ld(15, ld(1, cri_resources(200000, 1024, 1 << 30)))
)
create = ld(1, "sandbox-be") + ld(2, container_config) + ld(3, sandbox_config)
update = ld(1, "ctr-be") + ld(2, cri_resources(300000, 2048, 2 << 30)) + smap(4, {"a": "b"})
# A field this proxy's CRI API does not know (number 99), nested and at the top.
unknown = ld(99, "from a newer kubelet")
run_pod_unknown = ld(1, sandbox_config + unknown) + ld(2, "runc") + unknown

hook_answer = smap(1, {"added": "by-hook"}) + ld(2, hook_resources(50000, 512, 1 << 29, "4-5")) + smap(4, {"ENV": "1"})
pod_answer = smap(1, {"l": "v"}) + smap(2, {"a": "v"}) + ld(3, "/kubepods/other") + ld(4, hook_resources(1, 2, 3))

proxy = {
    "0-run": b"0" + run_pod,
    "0-run-unknown": b"0" + run_pod_unknown,
    "1-create": b"1" + create,
    "2-update": b"2" + update,
    "3-run-answer": b"3\x80" + run_pod + pod_answer,
    "4-create-answer": b"4\x80" + create + hook_answer,
    "5-update-answer": b"5\x80" + update + hook_answer,
    "7-walk": b"70" + run_pod_unknown,
}
for name, body in proxy.items():
    write("runtime_proxy", name, body)
