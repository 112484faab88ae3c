# kind's node base image, rebuilt offline: kind's own base files (images/base/files of the kind module, copied
# into this build context by build.sh) on a debootstrapped Debian root filesystem that already holds systemd, the
# CNI plugins and the networking tools, with containerd 2 and runc built here from the Go module proxy
# (hack/toolchain.py; build.sh copies them into runtime/), where kind's base image puts its own builds. Mirrors the
# steps of kind's images/base/Dockerfile that do not download anything.
ARG ROOTFS
FROM ${ROOTFS}
COPY files/usr/local/bin/ /usr/local/bin/
COPY files/kind/ /kind/
COPY files/etc/ /etc/
COPY runtime/containerd runtime/containerd-shim-runc-v2 runtime/ctr /usr/local/bin/
COPY runtime/runc /usr/local/sbin/runc
RUN chmod 0755 /usr/local/bin/* /usr/local/sbin/runc /kind/bin /kind/bin/* \
 && find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \
 && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
      /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
      /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \
 && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \
 && ln -sf "$(command -v systemd || echo /lib/systemd/systemd)" /sbin/init \
 && containerd --version && runc --version \
 # kind's containerd config and kubelet look for CNI plugins in /opt/cni/bin; Debian ships them in /usr/lib/cni.
 && mkdir -p /opt/cni/bin && cp /usr/lib/cni/host-local /usr/lib/cni/loopback /usr/lib/cni/ptp /usr/lib/cni/portmap /opt/cni/bin/ \
 # kind's containerd config names this spec: the default OCI spec plus kind's product-uuid mount hook.
 && ctr oci spec \
    | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
    | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json \
 # Let containerd clamp each container's oom_score_adj to its own: lowering it needs CAP_SYS_RESOURCE, which
 # machines whose capability bounding set lacks it cannot grant (runc then fails with "can't get final child's
 # PID from pipe"). Costs nothing where the capability exists. kind's config.toml is still in containerd's
 # version-2 format, which containerd 2 migrates when it loads it (the CRI settings move to
 # io.containerd.cri.v1.runtime and .images): the checks below read the migrated result, `containerd config dump`.
 && sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' /etc/containerd/config.toml \
 && containerd config dump >/tmp/containerd-config.toml \
 && grep -q '^ *restrict_oom_score_adj = true' /tmp/containerd-config.toml \
 # CDI: containerd 2.4 has no switch for it any more (enable_cdi is gone, CDI is always on); its spec folders:
 && grep -q "^ *cdi_spec_dirs = \['/etc/cdi', '/var/run/cdi'\]" /tmp/containerd-config.toml \
 && rm /tmp/containerd-config.toml \
 # The fuse-overlayfs snapshotter is only for rootless docker, which this test-bed does not use.
 && rm -f /etc/systemd/system/containerd-fuse-overlayfs.service \
 && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \
 && systemctl mask systemd-binfmt.service \
 && mkdir -p /etc/kubernetes/manifests
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
