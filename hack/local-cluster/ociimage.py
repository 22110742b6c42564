#!/usr/bin/env python3
"""Write a one-layer OCI image-layout tarball for a dynamically linked binary, without Docker.

usage: ociimage.py OUT.tar IMAGE_NAME --exe SRC:DEST [--entrypoint JSON] [--user UID:GID] [--env K=V]...

The layer holds DEST (mode 0755), every shared library `ldd SRC` reports and the ELF interpreter, each at
the absolute path the host uses, and a small distroless-like base: /etc/passwd, /etc/group and
/etc/nsswitch.conf with root/nobody/nonroot(65532), /tmp (1777), /root and /home/nonroot (0700).
The entrypoint defaults to [DEST]. `ctr images import` registers the image under IMAGE_NAME
(io.containerd.image.name annotation). The output is deterministic: fixed mtimes and owners, sorted
entries, no timestamps in the config, so equal inputs give equal digests.

Prints one tab-separated line: IMAGE_NAME, tarball bytes, manifest digest, config digest, layer files.
This is a sibling of hack/node-runtime/mkimage.py (a shared kit we do not edit), which has no
library closure, file modes, owners or image user."""
import argparse, hashlib, io, json, os, platform, re, struct, subprocess, sys, tarfile

ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Same users and groups as gcr.io/distroless/cc-debian12. /etc/passwd matters: for a numeric
# runAsUser the runtime takes the primary group from it (gid 0 when the uid is missing), so without
# it the chart's 65532 pods would run with group root, unlike on distroless.
BASE_FILES = {
    "etc/passwd": "root:x:0:0:root:/root:/sbin/nologin\n"
                  "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
                  "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
    "etc/group": "root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n",
    # glibc without this file tries DNS before /etc/hosts; distroless ships the same line.
    "etc/nsswitch.conf": "hosts: files dns\n",
}
# (path, mode, uid) of directories that need more than the default 0755 root.
BASE_DIRS = [("tmp", 0o1777, 0), ("root", 0o700, 0), ("home", 0o755, 0), ("home/nonroot", 0o700, 65532),
             ("dev", 0o755, 0), ("proc", 0o755, 0), ("sys", 0o755, 0), ("etc", 0o755, 0)]


def elf_interpreter(path):
    """PT_INTERP of an ELF file, or None when it is statically linked."""
    with open(path, "rb") as f:
        data = f.read(1 << 16)
    if data[:4] != b"\x7fELF":
        sys.exit("%s: not an ELF file" % path)
    is64, little = data[4] == 2, data[5] == 1
    e = "<" if little else ">"
    if is64:
        phoff, = struct.unpack_from(e + "Q", data, 0x20)
        phentsize, phnum = struct.unpack_from(e + "HH", data, 0x36)
    else:
        phoff, = struct.unpack_from(e + "I", data, 0x1C)
        phentsize, phnum = struct.unpack_from(e + "HH", data, 0x2A)
    with open(path, "rb") as f:
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            ph = f.read(phentsize)
            if struct.unpack_from(e + "I", ph, 0)[0] != 3:  # PT_INTERP
                continue
            off, size = struct.unpack_from(e + ("QxxxxxxxxxxxxxxxxQ" if is64 else "IxxxxxxxxI"), ph, 8 if is64 else 4)
            f.seek(off)
            return f.read(size).rstrip(b"\0").decode()
    return None


def shared_libraries(path):
    """Absolute paths of the interpreter and every library the dynamic loader maps for `path`."""
    interp = elf_interpreter(path)
    if interp is None:
        return []
    out = subprocess.run(["ldd", path], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("ldd %s failed: %s" % (path, out.stderr.strip() or out.stdout.strip()))
    libs = {interp}
    for line in out.stdout.splitlines():
        line = line.strip()
        if "=> not found" in line:
            sys.exit("ldd %s: %s" % (path, line))
        m = re.match(r"^\S+ => (/\S+) \(0x[0-9a-f]+\)$", line) or re.match(r"^(/\S+) \(0x[0-9a-f]+\)$", line)
        if m:
            libs.add(m.group(1))
        elif not re.match(r"^\S+ \(0x[0-9a-f]+\)$", line):  # only the vDSO has no path
            sys.exit("ldd %s: unexpected line %r" % (path, line))
    return sorted(libs)


def tar_entry(name, kind=tarfile.REGTYPE, data=b"", mode=0o755, uid=0, link=""):
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode, ti.mtime, ti.linkname, ti.size = kind, mode, 0, link, len(data)
    ti.uid = ti.gid = uid
    return ti, io.BytesIO(data) if kind == tarfile.REGTYPE else None


def tar_bytes(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for ti, f in entries:
            tf.addfile(ti, f)
    return buf.getvalue()


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def read(path):
    with open(os.path.realpath(path), "rb") as f:
        return f.read()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("name")
    ap.add_argument("--exe", required=True, help="SRC:DEST, the binary and its place in the image")
    ap.add_argument("--entrypoint", help="JSON list; default [DEST]")
    ap.add_argument("--user", help="image user, e.g. 65532:65532; default root")
    ap.add_argument("--env", action="append", default=[], help="K=V; PATH defaults to the distroless one")
    args = ap.parse_args()

    src, dest = args.exe.split(":", 1)
    if not dest.startswith("/"):
        sys.exit("--exe DEST must be absolute: " + dest)
    files = {k: tar_entry(k, data=v.encode(), mode=0o644) for k, v in BASE_FILES.items()}
    for lib in shared_libraries(src):
        files[lib.strip("/")] = tar_entry(lib.strip("/"), data=read(lib), mode=os.stat(lib).st_mode & 0o7777)
    files[dest.strip("/")] = tar_entry(dest.strip("/"), data=read(src), mode=0o755)

    dirs = {d: tar_entry(d, tarfile.DIRTYPE, mode=m, uid=u) for d, m, u in BASE_DIRS}
    for path in files:
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            dirs.setdefault(d, tar_entry(d, tarfile.DIRTYPE))
    # Sorted by path so a directory precedes its content.
    entries = {**dirs, **files}
    layer = tar_bytes([entries[p] for p in sorted(entries)])

    env = args.env if any(e.startswith("PATH=") for e in args.env) else [DEFAULT_PATH] + args.env
    cfg = {"Entrypoint": json.loads(args.entrypoint) if args.entrypoint else [dest], "Env": env, "WorkingDir": "/"}
    if args.user:
        cfg["User"] = args.user
    config = json.dumps({"architecture": ARCH, "os": "linux", "config": cfg,
                         "rootfs": {"type": "layers", "diff_ids": [digest(layer)]}}, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digest(layer), "size": len(layer)}],
    }, sort_keys=True).encode()
    tag = args.name.rsplit(":", 1)[1] if ":" in args.name.rsplit("/", 1)[-1] else "latest"
    index = json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(manifest), "size": len(manifest),
        "platform": {"architecture": ARCH, "os": "linux"},
        "annotations": {"io.containerd.image.name": args.name, "org.opencontainers.image.ref.name": tag}}]},
        sort_keys=True).encode()
    blobs = [tar_entry("blobs/sha256/" + digest(d)[7:], data=d, mode=0o644) for d in (layer, config, manifest)]
    out = tar_bytes([tar_entry("blobs", tarfile.DIRTYPE), tar_entry("blobs/sha256", tarfile.DIRTYPE),
                     tar_entry("oci-layout", data=b'{"imageLayoutVersion":"1.0.0"}', mode=0o644),
                     tar_entry("index.json", data=index, mode=0o644)] + blobs)
    with open(args.out + ".tmp", "wb") as f:
        f.write(out)
    os.replace(args.out + ".tmp", args.out)
    print("\t".join([args.name, str(len(out)), digest(manifest), digest(config), str(len(files))]))


main()
