# kind's node base image, rebuilt offline: kind's own base files (images/base/files of the kind module, copied
# into this build context by build.sh) on a debootstrapped Debian root filesystem that already holds systemd,
# Debian's containerd and runc, the CNI plugins and the networking tools. Mirrors the steps of kind's
# images/base/Dockerfile that do not download anything.
ARG ROOTFS
FROM ${ROOTFS}
COPY files/usr/local/bin/ /usr/local/bin/
COPY files/kind/ /kind/
COPY files/etc/ /etc/
RUN chmod 0755 /usr/local/bin/* /kind/bin /kind/bin/* \
 && find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \
 && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
      /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
      /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \
 && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \
 && ln -sf "$(command -v systemd || echo /lib/systemd/systemd)" /sbin/init \
 # kind's units and scripts expect containerd and runc under /usr/local; Debian installs them under /usr.
 && ln -sf /usr/bin/containerd /usr/local/bin/containerd \
 && ln -sf /usr/bin/containerd-shim-runc-v2 /usr/local/bin/containerd-shim-runc-v2 \
 && ln -sf /usr/bin/ctr /usr/local/bin/ctr \
 && ln -sf /usr/sbin/runc /usr/local/sbin/runc \
 # kind's containerd config and kubelet look for CNI plugins in /opt/cni/bin; Debian ships them in /usr/lib/cni.
 && mkdir -p /opt/cni/bin && cp /usr/lib/cni/host-local /usr/lib/cni/loopback /usr/lib/cni/ptp /usr/lib/cni/portmap /opt/cni/bin/ \
 # kind's containerd config names this spec: the default OCI spec plus kind's product-uuid mount hook.
 && ctr oci spec \
    | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
    | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json \
 # Let containerd clamp each container's oom_score_adj to its own: lowering it needs CAP_SYS_RESOURCE, which
 # machines whose capability bounding set lacks it cannot grant (runc then fails with "can't get final child's
 # PID from pipe"). Costs nothing where the capability exists.
 && sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' /etc/containerd/config.toml \
 # The fuse-overlayfs snapshotter is only for rootless docker, which this test-bed does not use.
 && rm -f /etc/systemd/system/containerd-fuse-overlayfs.service \
 && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \
 && systemctl mask systemd-binfmt.service \
 && mkdir -p /etc/kubernetes/manifests
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
