#!/usr/bin/env python3
"""Run each imported image once through CRI, the way kubelet would start it from the chart.

usage: images_check.py SPEC.json
SPEC.json is a list of {"name", "image", "command": [...], "user": uid or null, "expect": text}.
For each: ImageStatus by the chart's name, a pod sandbox (cgroup parent $NR_KUBEPODS/besteffort/pod<uid>,
or /koord-imgcheck/pod<uid> without NR_KUBEPODS), one container with the
command (a chart-like security context: run_as_user when "user" is set, read-only root filesystem),
then checks the OCI user in the runtime spec (uid:gid from the image's /etc/passwd), exit code 0 and
that the container's log contains "expect". Everything it creates is removed again.
Env: NR_ROOT (Python CRI stubs in $NR_ROOT/py, from hack/node-runtime/setup.sh), NR_CRI_SOCK,
NR_KUBEPODS (optional). Pods use the host network, so no CNI is needed. The sandboxes carry no kubelet
labels, so a kubelet on the same runtime ignores them."""
import json, os, sys, tempfile, time, uuid

sys.path.insert(0, os.path.join(os.environ["NR_ROOT"], "py"))
import grpc, cri_pb2 as pb, cri_pb2_grpc as rpc

channel = grpc.insecure_channel("unix://" + os.environ["NR_CRI_SOCK"])
rt, img = rpc.RuntimeServiceStub(channel), rpc.ImageServiceStub(channel)
# Under the kit's test subtree when given (its down.sh removes it), else a subtree of our own: a
# node's /kubepods belongs to its kubelet.
kubepods = os.environ.get("NR_KUBEPODS")
CG = "/sys/fs/cgroup"


def log_text(path):
    """Container output without the CRI log prefix (`<time> <stream> <P|F> `)."""
    with open(path) as f:
        return "".join(line.split(" ", 3)[3] if line.count(" ") >= 3 else line for line in f)


def check_one(spec, logs):
    status = img.ImageStatus(pb.ImageStatusRequest(image=pb.ImageSpec(image=spec["image"])), timeout=30).image
    if not status.id:
        return "image %s is not known to the CRI" % spec["image"]
    uid = uuid.uuid4().hex[:12]
    user = spec.get("user")
    parent = "%s/besteffort/pod%s" % (kubepods, uid) if kubepods else "/koord-imgcheck/pod" + uid
    # Host network: no CNI involved, so the check works on any containerd (and sets no hostname).
    sandbox = pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name="imgcheck-" + spec["name"], uid=uid, namespace="default"),
        log_directory=os.path.join(logs, uid),
        linux=pb.LinuxPodSandboxConfig(cgroup_parent=parent, security_context=pb.LinuxSandboxSecurityContext(
            namespace_options=pb.NamespaceOption(network=pb.NODE))))
    sb = rt.RunPodSandbox(pb.RunPodSandboxRequest(config=sandbox), timeout=60).pod_sandbox_id
    try:
        ctx = pb.LinuxContainerSecurityContext(readonly_rootfs=True)
        if user is not None:
            ctx.run_as_user.value = user
        config = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=spec["name"]), image=pb.ImageSpec(image=spec["image"]),
            command=spec["command"], log_path="c.log", linux=pb.LinuxContainerConfig(security_context=ctx))
        cid = rt.CreateContainer(pb.CreateContainerRequest(
            pod_sandbox_id=sb, config=config, sandbox_config=sandbox), timeout=60).container_id
        info = json.loads(rt.ContainerStatus(pb.ContainerStatusRequest(
            container_id=cid, verbose=True), timeout=30).info["info"])
        proc_user = info["runtimeSpec"]["process"]["user"]
        ids = "%s:%s" % (proc_user.get("uid", 0), proc_user.get("gid", 0))
        want_ids = "%d:%d" % (user, user) if user is not None else "0:0"
        if ids != want_ids:
            return "runs as %s, want %s" % (ids, want_ids)
        t0 = time.monotonic()
        rt.StartContainer(pb.StartContainerRequest(container_id=cid), timeout=60)
        while True:
            st = rt.ContainerStatus(pb.ContainerStatusRequest(container_id=cid), timeout=30).status
            if st.state == pb.CONTAINER_EXITED:
                break
            if time.monotonic() - t0 > 60:
                return "still running after 60 s"
            time.sleep(0.05)
        out = log_text(os.path.join(logs, uid, "c.log"))
        if st.exit_code != 0:
            return "exit code %d, output:\n%s" % (st.exit_code, out)
        if spec["expect"].strip() not in out:
            return "output lacks %r:\n%s" % (spec["expect"], out)
        first = next((l for l in out.splitlines() if l.strip()), "(no output)")
        print("ok    %-20s %-52s as %-11s exit 0 in %4.0f ms: %s" % (
            spec["name"], " ".join(spec["command"])[:52], ids, (time.monotonic() - t0) * 1000, first[:70]))
        return None
    finally:
        rt.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=sb), timeout=60)
        rt.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=sb), timeout=60)
        # The runtime leaves the pod cgroup behind (kubelet removes it on a node); so do we.
        for h in os.listdir(CG):
            for d in [parent] + ([] if kubepods else ["/koord-imgcheck"]):
                if os.path.isdir(CG + "/" + h + d):
                    os.rmdir(CG + "/" + h + d)


def main():
    with open(sys.argv[1]) as f:
        specs = json.load(f)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="imgcheck-") as logs:
        for spec in specs:
            err = check_one(spec, logs)
            if err:
                failed += 1
                print("FAIL  %s (%s): %s" % (spec["name"], spec["image"], err))
    sys.exit(1 if failed else 0)


main()
