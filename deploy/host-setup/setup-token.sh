#!/bin/sh
# Creates the least-privilege Proxmox VE identity the BigFleet provider uses:
# a user, narrowly scoped roles, a resource pool, ACLs, and a
# privilege-separated API token. Run as root on any node of the cluster
# (needs pveum and pvesh). Safe to re-run: existing objects are kept and
# brought up to date; an existing token keeps its secret unless --rotate.
#
#   sh setup-token.sh [options]
#
# Options (each also settable through the environment variable shown):
#   --user USER@REALM     BIGFLEET_USER        bigfleet@pve
#   --token-name NAME     BIGFLEET_TOKEN_NAME  autoscaler
#   --pool POOL           BIGFLEET_POOL        bigfleet
#   --templates LIST      BIGFLEET_TEMPLATES   9000     template VMIDs, comma list
#   --storages LIST       BIGFLEET_STORAGES    local-lvm  storages the clones' disks use
#   --bridges LIST        BIGFLEET_BRIDGES     vmbr0    bridges, or ZONE/VNET for SDN vnets
#   --vlan-tags LIST      BIGFLEET_VLAN_TAGS   (any)    VLAN tags the template NICs use
#                                                       (tag= and trunks= values); narrows
#                                                       SDN.Use to exactly those VLANs
#   --resize-disks        BIGFLEET_RESIZE_DISKS=1  for instance types with disk_gib: grow
#                                              the clones' boot disks (VM.Config.Disk)
#   --set-network         BIGFLEET_SET_NETWORK=1   for instance types with network: set the
#                                              clones' net0 (VM.Config.Network); name the
#                                              types' bridges in --bridges (and VLANs in
#                                              --vlan-tags, if given)
#   --role-prefix PREFIX  BIGFLEET_ROLE_PREFIX BigFleet
#   --no-audit-all-vms    BIGFLEET_AUDIT_ALL_VMS=0
#   --rotate              BIGFLEET_ROTATE=1    replace the token (prints a new secret); the
#                                              old secret stops working at once
#   --rotate --keep-old   BIGFLEET_KEEP_OLD=1  add a new token <name>-r<UTC time> beside the
#                                              old one, with the same ACLs; prints the token
#                                              file content (NEW_ID=SECRET, then the old
#                                              token's line) and the Secret update (no downtime)
#   --remove-old          BIGFLEET_REMOVE_OLD=1  remove every token of the family but the
#                                              newest, once the provider uses it
#   --dry-run             BIGFLEET_DRY_RUN=1   print the changes, make none
#   --pve-major N         PVE_MAJOR            skip version detection (8 or 9)
#   (PVE_NODE_DIR, default /etc/pve/local: where this node's API certificate is)
#
# What the provider calls, and so what it is granted (nothing else):
#   clone the template           VM.Clone on /vms/<template>; VM.Allocate on
#                                /pool/<pool> (clones are created into the pool);
#                                Datastore.AllocateSpace on the disks' storage;
#                                SDN.Use on the bridge/vnet of the template NICs,
#                                and on their VLAN (<bridge>/<tag>) when tagged
#   size and tag the clone       VM.Config.CPU, VM.Config.Memory, VM.Config.Options
#   grow its boot disk           VM.Config.Disk (--resize-disks); Datastore.AllocateSpace
#                                on the disk's storage (--storages)
#   set its net0                 VM.Config.Network (--set-network); SDN.Use on the
#                                bridge/vnet (--bridges) and VLAN (--vlan-tags)
#   start / stop                 VM.PowerMgmt
#   destroy                      VM.Allocate
#   list / read VMs and tasks    VM.Audit, Pool.Audit, Datastore.Audit
#   each node's memory and CPUs  Sys.Audit on /nodes (node capacity: no VM is
#                                cloned into a node without room for it)
#   clone a template whose cpu is a custom model (PVE 9)
#                                Mapping.Use on /mapping/cpu/<model>, read from
#                                each template's config
#   guest agent (osinfo, file-write, exec)
#                                PVE 8: VM.Monitor
#                                PVE 9: VM.GuestAgent.Audit + VM.GuestAgent.Unrestricted
# No cloud-init, snapshot, backup or migrate rights; of Sys.* only Sys.Audit on
# /nodes (read-only); disk and network rights only with --resize-disks and
# --set-network.
set -eu

BIGFLEET_USER="${BIGFLEET_USER:-bigfleet@pve}"
BIGFLEET_TOKEN_NAME="${BIGFLEET_TOKEN_NAME:-autoscaler}"
BIGFLEET_POOL="${BIGFLEET_POOL:-bigfleet}"
BIGFLEET_TEMPLATES="${BIGFLEET_TEMPLATES:-9000}"
BIGFLEET_STORAGES="${BIGFLEET_STORAGES:-local-lvm}"
BIGFLEET_BRIDGES="${BIGFLEET_BRIDGES:-vmbr0}"
BIGFLEET_VLAN_TAGS="${BIGFLEET_VLAN_TAGS:-}"
BIGFLEET_ROLE_PREFIX="${BIGFLEET_ROLE_PREFIX:-BigFleet}"
BIGFLEET_AUDIT_ALL_VMS="${BIGFLEET_AUDIT_ALL_VMS:-1}"
BIGFLEET_RESIZE_DISKS="${BIGFLEET_RESIZE_DISKS:-0}"
BIGFLEET_SET_NETWORK="${BIGFLEET_SET_NETWORK:-0}"
BIGFLEET_ROTATE="${BIGFLEET_ROTATE:-0}"
BIGFLEET_KEEP_OLD="${BIGFLEET_KEEP_OLD:-0}"
BIGFLEET_REMOVE_OLD="${BIGFLEET_REMOVE_OLD:-0}"
BIGFLEET_DRY_RUN="${BIGFLEET_DRY_RUN:-0}"
PVE_MAJOR="${PVE_MAJOR:-}"

prog="setup-token.sh"

die() {
	echo "${prog}: $*" >&2
	exit 1
}

info() {
	echo "${prog}: $*" >&2
}

usage() {
	sed -n '2,/^set -eu$/p' "$0" | sed -e '/^set -eu$/d' -e 's/^# \{0,1\}//'
}

need_arg() {
	[ "$#" -ge 2 ] || die "$1 needs a value"
}

while [ "$#" -gt 0 ]; do
	case "$1" in
	--user) need_arg "$@"; BIGFLEET_USER="$2"; shift 2 ;;
	--user=*) BIGFLEET_USER="${1#*=}"; shift ;;
	--token-name) need_arg "$@"; BIGFLEET_TOKEN_NAME="$2"; shift 2 ;;
	--token-name=*) BIGFLEET_TOKEN_NAME="${1#*=}"; shift ;;
	--pool) need_arg "$@"; BIGFLEET_POOL="$2"; shift 2 ;;
	--pool=*) BIGFLEET_POOL="${1#*=}"; shift ;;
	--templates | --template) need_arg "$@"; BIGFLEET_TEMPLATES="$2"; shift 2 ;;
	--templates=* | --template=*) BIGFLEET_TEMPLATES="${1#*=}"; shift ;;
	--storages | --storage) need_arg "$@"; BIGFLEET_STORAGES="$2"; shift 2 ;;
	--storages=* | --storage=*) BIGFLEET_STORAGES="${1#*=}"; shift ;;
	--bridges | --bridge) need_arg "$@"; BIGFLEET_BRIDGES="$2"; shift 2 ;;
	--bridges=* | --bridge=*) BIGFLEET_BRIDGES="${1#*=}"; shift ;;
	--vlan-tags | --vlan-tag) need_arg "$@"; BIGFLEET_VLAN_TAGS="$2"; shift 2 ;;
	--vlan-tags=* | --vlan-tag=*) BIGFLEET_VLAN_TAGS="${1#*=}"; shift ;;
	--role-prefix) need_arg "$@"; BIGFLEET_ROLE_PREFIX="$2"; shift 2 ;;
	--role-prefix=*) BIGFLEET_ROLE_PREFIX="${1#*=}"; shift ;;
	--no-audit-all-vms) BIGFLEET_AUDIT_ALL_VMS=0; shift ;;
	--resize-disks) BIGFLEET_RESIZE_DISKS=1; shift ;;
	--set-network) BIGFLEET_SET_NETWORK=1; shift ;;
	--rotate) BIGFLEET_ROTATE=1; shift ;;
	--keep-old) BIGFLEET_KEEP_OLD=1; shift ;;
	--remove-old) BIGFLEET_REMOVE_OLD=1; shift ;;
	--dry-run) BIGFLEET_DRY_RUN=1; shift ;;
	--pve-major) need_arg "$@"; PVE_MAJOR="$2"; shift 2 ;;
	--pve-major=*) PVE_MAJOR="${1#*=}"; shift ;;
	-h | --help) usage; exit 0 ;;
	*) die "unknown option: $1 (see --help)" ;;
	esac
done

# ---- validate input before touching anything --------------------------------

case "${BIGFLEET_USER}" in
*@*) ;;
*) die "--user must be USER@REALM, got '${BIGFLEET_USER}'" ;;
esac
case "${BIGFLEET_USER}" in
*!*) die "--user must not contain '!' (the token name is --token-name)" ;;
esac
# pveum's token id format: a letter, then letters, digits, '.', '_' or '-'.
if ! printf '%s\n' "${BIGFLEET_TOKEN_NAME}" | grep -Eq '^[A-Za-z][A-Za-z0-9._-]*$'; then
	die "--token-name must match [A-Za-z][A-Za-z0-9._-]*, got '${BIGFLEET_TOKEN_NAME}'"
fi
if ! printf '%s\n' "${BIGFLEET_POOL}" | grep -Eq '^[A-Za-z0-9_][A-Za-z0-9._-]*$'; then
	die "--pool is not a valid pool id: '${BIGFLEET_POOL}'"
fi
[ -n "${BIGFLEET_TEMPLATES}" ] || die "--templates needs at least one template VMID"
for vmid in $(printf '%s' "${BIGFLEET_TEMPLATES}" | tr ',' ' '); do
	printf '%s\n' "${vmid}" | grep -Eq '^[1-9][0-9]{2,8}$' ||
		die "--templates: '${vmid}' is not a VMID (100..999999999)"
done
for tag in $(printf '%s' "${BIGFLEET_VLAN_TAGS}" | tr ',' ' '); do
	# A VLAN id: 1..4094.
	if ! printf '%s\n' "${tag}" | grep -Eq '^[1-9][0-9]{0,3}$' || [ "${tag}" -gt 4094 ]; then
		die "--vlan-tags: '${tag}' is not a VLAN id (1..4094)"
	fi
done
if [ "${BIGFLEET_KEEP_OLD}" = "1" ] && [ "${BIGFLEET_ROTATE}" != "1" ]; then
	die "--keep-old goes with --rotate (a new token beside the old one)"
fi
if [ "${BIGFLEET_REMOVE_OLD}" = "1" ] && [ "${BIGFLEET_ROTATE}" = "1" ]; then
	die "--remove-old is a step of its own: run it after the provider uses the new token"
fi
case "${PVE_MAJOR}" in
'' | [0-9] | [0-9][0-9]) ;;
*) die "--pve-major must be a number, got '${PVE_MAJOR}'" ;;
esac

command -v pveum >/dev/null 2>&1 || die "pveum not found: run this on a Proxmox VE node"
command -v pvesh >/dev/null 2>&1 || die "pvesh not found: run this on a Proxmox VE node"

TOKEN_ID="${BIGFLEET_USER}!${BIGFLEET_TOKEN_NAME}"
ROLE_VM="${BIGFLEET_ROLE_PREFIX}Provisioner"
ROLE_TEMPLATE="${BIGFLEET_ROLE_PREFIX}TemplateCloner"
ROLE_STORAGE="${BIGFLEET_ROLE_PREFIX}Storage"
ROLE_NETWORK="${BIGFLEET_ROLE_PREFIX}Network"
ROLE_AUDIT="${BIGFLEET_ROLE_PREFIX}Auditor"
ROLE_NODES="${BIGFLEET_ROLE_PREFIX}NodeAuditor"

# Mutations go through run(), so --dry-run shows them without applying them.
# Read-only queries run either way.
run() {
	if [ "${BIGFLEET_DRY_RUN}" = "1" ]; then
		echo "+ $*" >&2
		return 0
	fi
	"$@"
}

# JSON lists from pveum are compact; allow optional spaces anyway.
json_has() {
	# $1 = field, $2 = value, stdin = JSON
	grep -Eq "\"$1\"[[:space:]]*:[[:space:]]*\"$2\""
}

# Every privilege this PVE knows appears in the built-in roles (Administrator
# holds them all), so the role list answers "does this privilege exist?".
ROLE_LIST="$(pveum role list --output-format json)"
known_priv() {
	printf '%s' "${ROLE_LIST}" | grep -q "$1"
}

# ---- guest-agent privileges: renamed in PVE 9 ---------------------------------

if [ -z "${PVE_MAJOR}" ]; then
	if known_priv 'VM.GuestAgent.Unrestricted'; then
		PVE_MAJOR=9
	elif known_priv 'VM.Monitor'; then
		PVE_MAJOR=8
	elif command -v pveversion >/dev/null 2>&1; then
		PVE_MAJOR="$(pveversion | sed -n 's|^pve-manager/\([0-9][0-9]*\)\..*|\1|p')"
	fi
fi
[ -n "${PVE_MAJOR}" ] || die "cannot tell the PVE version; pass --pve-major 8 or 9"
if [ "${PVE_MAJOR}" -ge 9 ]; then
	# Audit: ping/get-osinfo. Unrestricted: exec + exec-status (and file-write).
	AGENT_PRIVS="VM.GuestAgent.Audit,VM.GuestAgent.Unrestricted"
else
	AGENT_PRIVS="VM.Monitor"
fi
info "PVE ${PVE_MAJOR}: guest-agent privileges ${AGENT_PRIVS}"

# PVE 9 refuses a pool id that does not start with a letter; say so before
# anything is made (a refusal after the roles and the user would leave them).
if [ "${PVE_MAJOR}" -ge 9 ] && ! printf '%s\n' "${BIGFLEET_POOL}" | grep -Eq '^[A-Za-z]'; then
	die "--pool must start with a letter on Proxmox VE ${PVE_MAJOR}, got '${BIGFLEET_POOL}'"
fi

# ---- custom CPU models of the templates (PVE 9) --------------------------------

# qemu-server 9.1.15 and later check Mapping.Use on /mapping/cpu/<name> when a
# VM whose cpu is a custom model (custom-<name>) is cloned. Read each
# template's cpu (read-only) to grant exactly those models.
CPU_MODELS=""
if [ "${PVE_MAJOR}" -ge 9 ]; then
	RESOURCES="$(pvesh get /cluster/resources --type vm --output-format json 2>/dev/null || true)"
	for vmid in $(printf '%s' "${BIGFLEET_TEMPLATES}" | tr ',' ' '); do
		node="$(printf '%s' "${RESOURCES}" | grep -o '{[^{}]*}' |
			grep -E "\"vmid\"[[:space:]]*:[[:space:]]*\"?${vmid}\"?[,}]" |
			sed -n 's/.*"node"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' | head -n 1)"
		if [ -z "${node}" ]; then
			info "template ${vmid}: not found in the cluster; a custom CPU model it may get later is not granted (re-run this script then)"
			continue
		fi
		cpu="$(pvesh get "/nodes/${node}/qemu/${vmid}/config" --output-format json 2>/dev/null |
			sed -n 's/.*"cpu"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')"
		model="$(printf '%s' "${cpu}" | tr ',' '\n' | sed -n 's/^\(cputype=\)\{0,1\}custom-//p' | head -n 1)"
		if [ -n "${model}" ]; then
			info "template ${vmid}: custom CPU model '${model}'"
			case ",${CPU_MODELS}," in
			*",${model},"*) ;;
			*) CPU_MODELS="${CPU_MODELS:+${CPU_MODELS},}${model}" ;;
			esac
		fi
	done
fi

# ---- roles --------------------------------------------------------------------

ensure_role() {
	# $1 = role, $2 = comma-separated privileges (replaces the role's set, so a
	# re-run also removes privileges an older version of this script granted).
	if printf '%s' "${ROLE_LIST}" | json_has roleid "$1"; then
		info "role $1: updating privileges"
		run pveum role modify "$1" --privs "$2"
	else
		info "role $1: creating"
		run pveum role add "$1" --privs "$2"
	fi
}

# Scoped to the pool, and through it to every VM the provider created there.
# Disk and network rights only for instance types that grow disks or set net0.
VM_CONFIG_PRIVS="VM.Config.CPU,VM.Config.Memory,VM.Config.Options"
[ "${BIGFLEET_RESIZE_DISKS}" = "1" ] && VM_CONFIG_PRIVS="${VM_CONFIG_PRIVS},VM.Config.Disk"
[ "${BIGFLEET_SET_NETWORK}" = "1" ] && VM_CONFIG_PRIVS="${VM_CONFIG_PRIVS},VM.Config.Network"
ensure_role "${ROLE_VM}" "VM.Allocate,VM.Audit,${VM_CONFIG_PRIVS},VM.PowerMgmt,${AGENT_PRIVS},Pool.Audit"
# Only on the templates: clone and read, never change or start them.
ensure_role "${ROLE_TEMPLATE}" "VM.Clone,VM.Audit"
ensure_role "${ROLE_STORAGE}" "Datastore.AllocateSpace,Datastore.Audit"
# /nodes and /cluster/resources show a node's memory and CPUs only with Sys.Audit on it.
ensure_role "${ROLE_NODES}" "Sys.Audit"
if [ "${BIGFLEET_AUDIT_ALL_VMS}" = "1" ]; then
	# A clone joins the pool only when its disk copy ends; until then only
	# VM.Audit on /vms lets the provider see (and adopt) its in-flight clone.
	ensure_role "${ROLE_AUDIT}" "VM.Audit"
fi
ROLE_CPU="${BIGFLEET_ROLE_PREFIX}CpuModel"
if [ -n "${CPU_MODELS}" ]; then
	ensure_role "${ROLE_CPU}" "Mapping.Use"
fi
HAVE_SDN_USE=0
if known_priv 'SDN.Use'; then
	# PVE 8+ checks SDN.Use on the bridge/vnet of each NIC a clone copies.
	HAVE_SDN_USE=1
	ensure_role "${ROLE_NETWORK}" "SDN.Use"
fi

# ---- user and pool ---------------------------------------------------------------

if pveum user list --output-format json | json_has userid "${BIGFLEET_USER}"; then
	info "user ${BIGFLEET_USER}: exists"
else
	info "user ${BIGFLEET_USER}: creating (no password: it is used through its token only)"
	run pveum user add "${BIGFLEET_USER}" --comment "BigFleet CapacityProvider"
fi

if pveum pool list --output-format json | json_has poolid "${BIGFLEET_POOL}"; then
	info "pool ${BIGFLEET_POOL}: exists"
else
	info "pool ${BIGFLEET_POOL}: creating"
	run pveum pool add "${BIGFLEET_POOL}" --comment "VMs managed by BigFleet"
fi

# ---- token ------------------------------------------------------------------------

# A rotation that keeps the old token adds <name>-r<UTC time> beside it (Proxmox
# gives a token id one secret, so a new secret needs a new id). The family is
# <name> and its -r<time> tokens; the newest is the one in use, and the rest
# are removed by --remove-old. Removing a token also drops its ACLs.
TOKEN_NAME_RE="$(printf '%s' "${BIGFLEET_TOKEN_NAME}" | sed 's/[.]/[.]/g')"
family_tokens() {
	pveum user token list "${BIGFLEET_USER}" --output-format json 2>/dev/null |
		grep -o '"tokenid"[[:space:]]*:[[:space:]]*"[^"]*"' |
		sed 's/.*"\([^"]*\)"$/\1/' |
		grep -E "^${TOKEN_NAME_RE}(-r[0-9]{14})?\$" | LC_ALL=C sort || true
}
FAMILY="$(family_tokens)"
CURRENT="$(printf '%s\n' "${FAMILY}" | sed '/^$/d' | tail -n 1)"
if [ -n "${CURRENT}" ]; then
	TOKEN_ID="${BIGFLEET_USER}!${CURRENT}"
fi

TOKEN_SECRET=""
# Set by --rotate --keep-old: the token in use until now, kept as the token file's second line.
OLD_TOKEN_ID=""
create_token() {
	# $1 = token name
	if [ "${BIGFLEET_DRY_RUN}" = "1" ]; then
		run pveum user token add "${BIGFLEET_USER}" "$1" --privsep 1
		TOKEN_SECRET="(dry run: no token created)"
		return 0
	fi
	# --privsep 1: the token gets only the ACLs granted to it below, never all
	# of the user's rights.
	out="$(pveum user token add "${BIGFLEET_USER}" "$1" \
		--privsep 1 --comment "BigFleet CapacityProvider" --output-format json)"
	TOKEN_SECRET="$(printf '%s' "${out}" | sed -n 's/.*"value"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')"
	[ -n "${TOKEN_SECRET}" ] || die "token created but no secret in pveum's answer"
}

if [ "${BIGFLEET_REMOVE_OLD}" = "1" ]; then
	[ -n "${CURRENT}" ] || die "no token ${BIGFLEET_USER}!${BIGFLEET_TOKEN_NAME}[-r<time>] to keep"
	for name in ${FAMILY}; do
		[ "${name}" = "${CURRENT}" ] && continue
		info "token ${BIGFLEET_USER}!${name}: removing (the newest, ${TOKEN_ID}, stays)"
		run pveum user token remove "${BIGFLEET_USER}" "${name}"
	done
	[ "$(printf '%s\n' "${FAMILY}" | sed '/^$/d' | wc -l)" -gt 1 ] ||
		info "token ${TOKEN_ID}: the only one; nothing to remove"
elif [ -n "${CURRENT}" ] && [ "${BIGFLEET_KEEP_OLD}" = "1" ]; then
	NEW_NAME="${BIGFLEET_TOKEN_NAME}-r$(date -u +%Y%m%d%H%M%S)"
	info "token ${TOKEN_ID}: kept; adding ${BIGFLEET_USER}!${NEW_NAME} beside it"
	OLD_TOKEN_ID="${TOKEN_ID}"
	TOKEN_ID="${BIGFLEET_USER}!${NEW_NAME}"
	create_token "${NEW_NAME}"
	info "once the provider logs 'token ${OLD_TOKEN_ID} has no task in flight', run --remove-old"
elif [ -n "${CURRENT}" ]; then
	if [ "${BIGFLEET_ROTATE}" = "1" ]; then
		info "token ${TOKEN_ID}: rotating (the old secret stops working now; --keep-old avoids that)"
		run pveum user token remove "${BIGFLEET_USER}" "${CURRENT}"
		create_token "${CURRENT}"
	else
		info "token ${TOKEN_ID}: exists; keeping its secret (use --rotate for a new one)"
	fi
else
	info "token ${TOKEN_ID}: creating"
	create_token "${BIGFLEET_TOKEN_NAME}"
fi

# ---- ACLs ----------------------------------------------------------------------------

# A privilege-separated token holds the intersection of its own ACLs and its
# user's, so every grant goes to both.
grant() {
	# $1 = path, $2 = role, $3 = propagate (0|1)
	info "acl $1: $2 (propagate=$3)"
	run pveum acl modify "$1" --users "${BIGFLEET_USER}" --roles "$2" --propagate "$3"
	run pveum acl modify "$1" --tokens "${TOKEN_ID}" --roles "$2" --propagate "$3"
}

# propagate=1: the pool's members (the provider's VMs) inherit the role.
grant "/pool/${BIGFLEET_POOL}" "${ROLE_VM}" 1
for vmid in $(printf '%s' "${BIGFLEET_TEMPLATES}" | tr ',' ' '); do
	grant "/vms/${vmid}" "${ROLE_TEMPLATE}" 0
done
for storage in $(printf '%s' "${BIGFLEET_STORAGES}" | tr ',' ' '); do
	grant "/storage/${storage}" "${ROLE_STORAGE}" 0
done
# Propagated: every node a zone may be on, read only.
grant "/nodes" "${ROLE_NODES}" 1
# PVE 8+ checks SDN.Use per template NIC when cloning: on the bridge path for
# an untagged NIC, on <bridge>/<tag> for a VLAN tag (each VLAN of trunks=).
# Without --vlan-tags the bridge grant propagates to all its VLANs, so any
# tagged template works; without --set-network the token cannot change NICs
# (no VM.Config.Network), so it can only use the VLANs its templates already
# have (with it, any VLAN of the bridges: give --vlan-tags to narrow that).
# With --vlan-tags exactly the bridge and those VLANs are granted.
if [ "${HAVE_SDN_USE}" = "1" ]; then
	for bridge in $(printf '%s' "${BIGFLEET_BRIDGES}" | tr ',' ' '); do
		case "${bridge}" in
		*/*) path="/sdn/zones/${bridge}" ;;
		# Plain Linux bridges live in the built-in "localnetwork" zone.
		*) path="/sdn/zones/localnetwork/${bridge}" ;;
		esac
		if [ -z "${BIGFLEET_VLAN_TAGS}" ]; then
			grant "${path}" "${ROLE_NETWORK}" 1
		else
			grant "${path}" "${ROLE_NETWORK}" 0
			for tag in $(printf '%s' "${BIGFLEET_VLAN_TAGS}" | tr ',' ' '); do
				grant "${path}/${tag}" "${ROLE_NETWORK}" 0
			done
		fi
	done
fi
if [ "${BIGFLEET_AUDIT_ALL_VMS}" = "1" ]; then
	grant "/vms" "${ROLE_AUDIT}" 1
fi
for model in $(printf '%s' "${CPU_MODELS}" | tr ',' ' '); do
	grant "/mapping/cpu/${model}" "${ROLE_CPU}" 0
done

# ---- result ---------------------------------------------------------------------------

echo
echo "Proxmox API token for BigFleet"
echo "  token id (proxmox.tokenID): ${TOKEN_ID}"
echo "  pool     (proxmox.pool):    ${BIGFLEET_POOL}"
if [ -n "${OLD_TOKEN_ID}" ]; then
	# The provider uses the first line and reads the tasks the old token
	# started with the second until they end (docs/credentials.md#rotating-the-token).
	echo "  token secret:               ${TOKEN_SECRET}"
	echo
	echo "Token file content: the new token first, the one in use until now second:"
	echo "  ${TOKEN_ID}=${TOKEN_SECRET}"
	echo "  ${OLD_TOKEN_ID}=<the secret your token file holds now>"
	echo
	echo "Proxmox shows this secret only once. Update the Kubernetes Secret in place now (the"
	echo "secret in use, its first line, becomes the second):"
	cat <<EOF
  old="\$(kubectl -n bigfleet get secret bigfleet-proxmox-token -o jsonpath='{.data.token}' | base64 -d | head -n 1)"
  kubectl -n bigfleet create secret generic bigfleet-proxmox-token \\
    --from-literal=token="\$(printf '%s\\n%s=%s\\n' '${TOKEN_ID}=${TOKEN_SECRET}' '${OLD_TOKEN_ID}' "\${old##*=}")" \\
    --dry-run=client -o yaml | kubectl apply -f -
EOF
elif [ -n "${TOKEN_SECRET}" ]; then
	echo "  token secret:               ${TOKEN_SECRET}"
	echo
	echo "Proxmox shows this secret only once. Store it in a Kubernetes Secret now:"
	echo "  kubectl -n bigfleet create secret generic bigfleet-proxmox-token \\"
	echo "    --from-literal=token='${TOKEN_SECRET}'"
else
	echo "  token secret:               (unchanged; rerun with --rotate for a new one)"
fi
# pveproxy serves pveproxy-ssl.pem (a certificate uploaded or from ACME) when
# it and its key exist, else pve-ssl.pem (signed by the cluster CA). Both are
# this node's own: another node behind the same URL serves another one.
NODE_DIR="${PVE_NODE_DIR:-/etc/pve/local}"
SERVED_CERT="${NODE_DIR}/pve-ssl.pem"
CUSTOM_CERT=0
if [ -f "${NODE_DIR}/pveproxy-ssl.pem" ] && [ -f "${NODE_DIR}/pveproxy-ssl.key" ]; then
	SERVED_CERT="${NODE_DIR}/pveproxy-ssl.pem"
	CUSTOM_CERT=1
fi

echo
if [ "${CUSTOM_CERT}" = "1" ]; then
	echo "TLS trust for the API (one is required): this node serves its own certificate"
	echo "(${SERVED_CERT}), which the cluster CA did not sign: give the provider the CA"
	echo "that issued it (for ACME, that CA's root)"
	echo "  kubectl -n bigfleet create secret generic bigfleet-proxmox-ca \\"
	echo "    --from-file=ca.pem=<that CA's certificate>"
else
	echo "TLS trust for the API (one is required): the cluster CA"
	echo "  kubectl -n bigfleet create secret generic bigfleet-proxmox-ca \\"
	echo "    --from-file=ca.pem=/etc/pve/pve-root-ca.pem"
fi
echo "or the SHA-256 fingerprint of the certificate this node serves (proxmox.tlsFingerprint;"
echo "it pins this node only):"
FINGERPRINT=""
if command -v openssl >/dev/null 2>&1 && [ -r "${SERVED_CERT}" ]; then
	FINGERPRINT="$(openssl x509 -in "${SERVED_CERT}" -noout -fingerprint -sha256 2>/dev/null |
		sed -n 's/^[^=]*=//p')"
fi
if [ -n "${FINGERPRINT}" ]; then
	echo "  ${FINGERPRINT}"
else
	echo "  openssl x509 -in ${SERVED_CERT} -noout -fingerprint -sha256"
fi
