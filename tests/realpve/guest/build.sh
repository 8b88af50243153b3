#!/bin/sh
# Builds the real-PVE lane's guest: a Debian 12 kernel and an initramfs that
# holds busybox, qemu-guest-agent with its shared libraries, the virtio
# modules the agent's port needs, and the node stand-ins under rootfs/
# (kubelet, kubectl, kubeadm). Everything comes from Debian packages
# (`apt-get download`); nothing is compiled.
#
#   sh build.sh inputs        print the packages and versions it would use
#   sh build.sh build OUTDIR  write OUTDIR/vmlinuz, OUTDIR/initrd.gz, OUTDIR/VERSIONS
#
# tests/realpve/template.ts caches the result by the hash of this directory
# and the `inputs` lines, so a build runs only when one of them changed.
set -eu

here="$(cd "$(dirname "$0")" && pwd)"

# qemu-ga's shared libraries on Debian 12 (the build checks each NEEDED entry
# resolves inside the image, so a missing one stops it).
LIBS="libc6 libgcc-s1 libglib2.0-0 libnuma1 libudev1 liburing2 libmount1 libblkid1 libselinux1 libpcre2-8-0 libffi8 zlib1g"
# The agent's port is a virtio-serial port on a virtio PCI device.
MODULES="virtio_pci virtio_console"

die() {
	echo "build.sh: $*" >&2
	exit 1
}

# The kernel package linux-image-amd64 currently points at.
kernel_pkg() {
	apt-cache depends linux-image-amd64 2>/dev/null |
		sed -n 's/^ *Depends: *\(linux-image-[0-9][^ ]*\)$/\1/p' | head -1
}

packages() {
	k="$(kernel_pkg)"
	[ -n "$k" ] || return 1
	echo "$k busybox-static qemu-guest-agent ${LIBS}"
}

ensure_lists() {
	if [ -z "$(kernel_pkg)" ]; then
		apt-get update -qq >/dev/null 2>&1 || die "apt-get update failed"
	fi
}

# "PACKAGE VERSION" per line, from one apt-cache call (each call costs seconds).
inputs() {
	ensure_lists
	pkgs="$(packages)" || die "cannot resolve linux-image-amd64's kernel package"
	# shellcheck disable=SC2086
	apt-cache policy ${pkgs} | awk '
		/^[^ ].*:$/ { p = substr($0, 1, length($0) - 1) }
		/^  Candidate:/ { print p, $2 }' >"${TMPDIR:-/tmp}/build-inputs.$$"
	for p in ${pkgs}; do
		v="$(awk -v p="$p" '$1 == p { print $2 }' "${TMPDIR:-/tmp}/build-inputs.$$")"
		[ -n "$v" ] && [ "$v" != "(none)" ] || { rm -f "${TMPDIR:-/tmp}/build-inputs.$$"; die "no candidate version of $p"; }
		echo "$p $v"
	done
	rm -f "${TMPDIR:-/tmp}/build-inputs.$$"
}

# Kernel modules in load order: each one's depends= (from its .modinfo) first.
module_order() {
	moddir="$1"
	shift
	seen=""
	visit() {
		case " ${seen} " in *" $1 "*) return 0 ;; esac
		f="$(find "${moddir}" -name "$1.ko" | head -1)"
		[ -n "$f" ] || die "module $1 not found in the kernel package"
		deps="$(grep -a -o 'depends=[a-z0-9_,-]*' "$f" | head -1 | sed 's/^depends=//' | tr ',' ' ')"
		# No local variables in sh: the recursion reuses f and deps, so look f up again.
		for d in ${deps}; do visit "$d"; done
		case " ${seen} " in *" $1 "*) return 0 ;; esac
		seen="${seen} $1"
		echo "$1 $(find "${moddir}" -name "$1.ko" | head -1)"
	}
	for m in "$@"; do visit "$m"; done
}

build() {
	out="$1"
	ensure_lists
	work="$(mktemp -d)"
	trap 'rm -rf "${work}"' EXIT
	mkdir -p "${work}/debs" "${work}/x" "${work}/root"
	(cd "${work}/debs" && apt-get download $(packages) >"${work}/apt.log" 2>&1) ||
		die "apt-get download failed: $(tail -3 "${work}/apt.log")"
	for deb in "${work}"/debs/*.deb; do dpkg-deb -x "${deb}" "${work}/x"; done
	x="${work}/x"
	r="${work}/root"
	bb="${x}/bin/busybox"
	[ -x "${bb}" ] || die "busybox-static has no /bin/busybox"

	mkdir -p "${r}/bin" "${r}/sbin" "${r}/usr/bin" "${r}/usr/sbin" "${r}/lib/modules" \
		"${r}/lib64" "${r}/lib/x86_64-linux-gnu" "${r}/proc" "${r}/sys" "${r}/dev" "${r}/run" \
		"${r}/tmp" "${r}/var/log" "${r}/var/lib" "${r}/etc/kubernetes" "${r}/etc/standin" "${r}/root"
	ln -s ../run "${r}/var/run"
	cp "${bb}" "${r}/bin/busybox"
	for applet in $("${bb}" --list); do
		[ "${applet}" = busybox ] || ln -sf busybox "${r}/bin/${applet}"
	done

	# qemu-ga and exactly the libraries the dynamic loader resolves for it.
	cp "${x}/usr/sbin/qemu-ga" "${r}/usr/sbin/qemu-ga"
	libpath="${x}/lib/x86_64-linux-gnu:${x}/usr/lib/x86_64-linux-gnu"
	loader="${x}/lib64/ld-linux-x86-64.so.2"
	[ -e "${loader}" ] || loader="${x}/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
	list="$("${loader}" --library-path "${libpath}" --list "${x}/usr/sbin/qemu-ga")" ||
		die "the loader cannot resolve qemu-ga's libraries"
	if printf '%s\n' "${list}" | grep -q 'not found'; then
		die "qemu-ga needs libraries not in the image: $(printf '%s\n' "${list}" | grep 'not found')"
	fi
	for lib in $(printf '%s\n' "${list}" | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p'); do
		case "${lib}" in "${x}"/*) ;; *) die "qemu-ga resolved ${lib} outside the image" ;; esac
		cp -L "${lib}" "${r}/lib/x86_64-linux-gnu/"
	done
	cp -L "${x}/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" "${r}/lib64/ld-linux-x86-64.so.2"

	kver="$(ls "${x}/lib/modules" | head -1)"
	[ -n "${kver}" ] || die "the kernel package has no modules"
	: >"${r}/etc/modules"
	module_order "${x}/lib/modules/${kver}" ${MODULES} | while read -r name file; do
		cp "${file}" "${r}/lib/modules/${name}.ko"
		echo "${name}" >>"${r}/etc/modules"
	done

	# The init, the stand-ins and their configuration.
	(cd "${here}/rootfs" && find . -type f) | while read -r f; do
		mkdir -p "${r}/$(dirname "${f}")"
		cp "${here}/rootfs/${f}" "${r}/${f}"
	done
	chmod 0755 "${r}/init" "${r}/etc/rc" "${r}/usr/bin/kubelet" "${r}/usr/bin/kubectl" \
		"${r}/usr/bin/kubeadm" "${r}/sbin/shutdown"

	mkdir -p "${out}"
	(cd "${r}" && find . | LC_ALL=C sort | "${bb}" cpio -o -H newc 2>/dev/null) | gzip -9 >"${out}/initrd.gz.new"
	cp "${x}/boot/vmlinuz-${kver}" "${out}/vmlinuz.new"
	inputs >"${out}/VERSIONS.new"
	echo "kernel ${kver}" >>"${out}/VERSIONS.new"
	mv "${out}/initrd.gz.new" "${out}/initrd.gz"
	mv "${out}/vmlinuz.new" "${out}/vmlinuz"
	mv "${out}/VERSIONS.new" "${out}/VERSIONS"
}

case "${1:-}" in
inputs) inputs ;;
build)
	[ "$#" -eq 2 ] || die "usage: build.sh build OUTDIR"
	build "$2"
	;;
*) die "usage: build.sh inputs | build OUTDIR" ;;
esac
