#!/usr/bin/env python3
"""Writes a single-layer OCI image archive (an OCI layout in a tar) from a list of files, without Docker.

The archive is what `ctr -n k8s.io images import` accepts. Everything is deterministic: entries are
sorted, owners are root, times are fixed, and the config carries no build time, so building the same
inputs twice gives the same manifest digest (which is how the node decides whether to re-import).

Usage: oci-image.py --spec SPEC --name REF --out FILE [--entrypoint JSON] [--cmd JSON] [--env K=V]...
          [--user U] [--workdir D] [--label K=V]...
       oci-image.py --normalize REF       prints the reference the way containerd stores it

SPEC has one entry a line:
    file <path-in-image> <source-file> [octal-mode]
    dir <path-in-image> [octal-mode]
    symlink <path-in-image> <target>
Parent directories are added as needed (mode 0755). The first printed line is the manifest digest.
"""

import argparse
import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile

FIXED_MTIME = 0
CREATED = "1970-01-01T00:00:00Z"


def normalize(ref):
    """The fully qualified form containerd stores and the kubelet asks for: a reference without a
    domain gets the reference grammar's default domain (and "library/" when it has one component),
    and one without a tag gets ":latest"."""
    first, _, rest = ref.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        ref = ("docker.io/library/" if not rest else "docker.io/") + ref
    last = ref.rsplit("/", 1)[-1]
    if ":" not in last and "@" not in last:
        ref += ":latest"
    return ref


def parse_spec(path):
    entries = {}
    with open(path, encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            parts = line.split()
            kind, dest = parts[0], parts[1].strip("/")
            if not dest:
                continue
            if kind == "file":
                mode = int(parts[3], 8) if len(parts) > 3 else None
                entries[dest] = ("file", parts[2], mode)
            elif kind == "dir":
                mode = int(parts[2], 8) if len(parts) > 2 else 0o755
                entries[dest] = ("dir", None, mode)
            elif kind == "symlink":
                entries[dest] = ("symlink", parts[2], None)
            else:
                sys.exit(f"oci-image: {path}:{lineno}: unknown entry kind {kind!r}")
    # Every parent must exist as a directory entry, or some unpackers create it with odd modes.
    for dest in list(entries):
        parent = os.path.dirname(dest)
        while parent:
            entries.setdefault(parent, ("dir", None, 0o755))
            parent = os.path.dirname(parent)
    return entries


def inputs_fingerprint(entries, argv):
    """Hash of the arguments and of every source file: small files by content (they are often written
    to a fresh temporary each build), large ones by identity (path, size, mtime, inode)."""
    h = hashlib.sha256()
    skip_next = False
    for a in argv:
        # The spec file is a fresh temporary each run; its content is covered by the entries below.
        if skip_next:
            skip_next = False
            continue
        if a == "--spec":
            skip_next = True
            continue
        h.update(a.encode() + b"\0")
    for dest in sorted(entries):
        kind, src, mode = entries[dest]
        if kind != "file":
            h.update(f"{dest}\0{kind}\0{src}\0{mode}\0".encode())
            continue
        h.update(f"{dest}\0{kind}\0{mode}\0".encode())
        st = os.stat(src)
        if st.st_size < (1 << 20):
            with open(src, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
        else:
            h.update(f"{src}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\0".encode())
    return h.hexdigest()


def tarinfo(name, kind):
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.mtime = FIXED_MTIME
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def write_layer(entries, out):
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for dest in sorted(entries):
            kind, src, mode = entries[dest]
            if kind == "dir":
                ti = tarinfo(dest, tarfile.DIRTYPE)
                ti.mode = mode
                tar.addfile(ti)
            elif kind == "symlink":
                ti = tarinfo(dest, tarfile.SYMTYPE)
                ti.linkname = src
                ti.mode = 0o777
                tar.addfile(ti)
            else:
                st = os.stat(src)  # follows symlinks on purpose: libraries are copied as real files
                ti = tarinfo(dest, tarfile.REGTYPE)
                ti.mode = mode if mode is not None else (st.st_mode & 0o7777)
                ti.size = st.st_size
                with open(src, "rb") as f:
                    tar.addfile(ti, f)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def add_bytes(tar, name, data):
    ti = tarinfo(name, tarfile.REGTYPE)
    ti.mode = 0o644
    ti.size = len(data)
    tar.addfile(ti, io.BytesIO(data))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--normalize", default=None, metavar="REF")
    ap.add_argument("--spec")
    ap.add_argument("--name", help="image reference, e.g. straggler-lab/lab:0.1.0")
    ap.add_argument("--out")
    ap.add_argument("--entrypoint", default=None, help="JSON list")
    ap.add_argument("--cmd", default=None, help="JSON list")
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--user", default=None)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--label", action="append", default=[])
    args = ap.parse_args()
    if args.normalize:
        print(normalize(args.normalize))
        return
    if not (args.spec and args.name and args.out):
        ap.error("--spec, --name and --out are required")
    args.name = normalize(args.name)

    entries = parse_spec(args.spec)
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)

    # Writing and hashing a 150 MB layer takes seconds: skip it when no input changed since last time.
    fingerprint = inputs_fingerprint(entries, sys.argv[1:])
    inputs_file = args.out + ".inputs"
    try:
        with open(inputs_file, encoding="utf-8") as f:
            old_fp, old_digest = f.read().split()
        if old_fp == fingerprint and os.path.exists(args.out):
            print(old_digest)
            return
    except (FileNotFoundError, ValueError):
        pass
    with tempfile.NamedTemporaryFile(dir=out_dir, prefix=".layer.", delete=False) as layer:
        layer_path = layer.name
    try:
        with open(layer_path, "wb") as f:
            write_layer(entries, f)
        layer_digest = sha256_file(layer_path)
        layer_size = os.path.getsize(layer_path)

        config = {"Env": args.env or ["PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin"]}
        if args.entrypoint:
            config["Entrypoint"] = json.loads(args.entrypoint)
        if args.cmd:
            config["Cmd"] = json.loads(args.cmd)
        if args.user:
            config["User"] = args.user
        if args.workdir:
            config["WorkingDir"] = args.workdir
        if args.label:
            config["Labels"] = dict(kv.split("=", 1) for kv in args.label)
        image_config = canonical({
            "architecture": "amd64",
            "os": "linux",
            "created": CREATED,
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
            "history": [{"created": CREATED, "created_by": "scripts/images/oci-image.py"}],
        })
        config_digest = hashlib.sha256(image_config).hexdigest()
        manifest = canonical({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": f"sha256:{config_digest}", "size": len(image_config)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": f"sha256:{layer_digest}", "size": layer_size}],
        })
        manifest_digest = hashlib.sha256(manifest).hexdigest()
        tag = args.name.rsplit(":", 1)[1] if ":" in args.name.rsplit("/", 1)[-1] else "latest"
        index = canonical({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": f"sha256:{manifest_digest}",
                "size": len(manifest),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {"io.containerd.image.name": args.name,
                                "org.opencontainers.image.ref.name": tag},
            }],
        })

        tmp_out = args.out + ".tmp"
        with tarfile.open(tmp_out, mode="w", format=tarfile.GNU_FORMAT) as tar:
            blobs = [(config_digest, image_config), (manifest_digest, manifest)]
            for d in ["blobs", "blobs/sha256"]:
                ti = tarinfo(d, tarfile.DIRTYPE)
                ti.mode = 0o755
                tar.addfile(ti)
            names = {f"blobs/sha256/{d}": data for d, data in blobs}
            names[f"blobs/sha256/{layer_digest}"] = None
            for name in sorted(names):
                if names[name] is None:
                    ti = tarinfo(name, tarfile.REGTYPE)
                    ti.mode = 0o644
                    ti.size = layer_size
                    with open(layer_path, "rb") as f:
                        tar.addfile(ti, f)
                else:
                    add_bytes(tar, name, names[name])
            add_bytes(tar, "index.json", index)
            add_bytes(tar, "oci-layout", canonical({"imageLayoutVersion": "1.0.0"}))
        os.replace(tmp_out, args.out)
    finally:
        os.unlink(layer_path)
    with open(inputs_file, "w", encoding="utf-8") as f:
        f.write(f"{fingerprint} sha256:{manifest_digest}\n")
    print(f"sha256:{manifest_digest}")


if __name__ == "__main__":
    main()
