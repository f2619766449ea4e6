"""What one pod-resources answer may cost once decoded, checked on its wire bytes first.

The 32 MiB receive limit bounds the bytes, not what they decode to: an empty `PodResources` is
two bytes on the wire and a few hundred in memory once parsed and walked, so 32 MiB of them took
the exporter to 1.3 GB, and 11 M one-character device IDs to 5.6 GB. This module walks the
protobuf wire format of an answer without building any message: it counts pods, containers,
device IDs and fields, and measures names and IDs, and refuses the answer at the first bound
passed. Each step of the walk is a few bytecodes, and it stops at a bound, so a hostile answer
costs a bounded amount of time too. An answer that passes decodes to a bounded size.

The field layout comes from the generated descriptors
(kube_gpu_exporter/exporter/podresources/v1/api.proto), so a field added there is walked without a
change here; only the bounds below are ours.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from kube_gpu_exporter.exporter.podresources.v1 import api_pb2

if TYPE_CHECKING:
    from google._upb._message import Descriptor as UpbDescriptor

    # A message's DESCRIPTOR is the pure-Python class or upb's C one, depending on the backend.
    AnyDescriptor: TypeAlias = Descriptor | UpbDescriptor

# The kubelet's max-pods is 110 by default and rarely set above 500; 5,000 leaves ten times the
# largest in use for pods a kubelet still lists while they terminate.
MAX_PODS = 5_000
# Pods have an application container, a few sidecars and init containers. Kubernetes sets no
# number, but a pod spec must fit etcd's 1.5 MiB; 100 is far past any real pod.
MAX_CONTAINERS_PER_POD = 100
# Four containers per pod at MAX_PODS.
MAX_CONTAINERS = 20_000
# Per answer, for every resource, not only GPUs: 8 GPUs × 7 MIG instances × time-slicing replicas
# stay in the hundreds, but plugins that advertise a device per unit of a resource (KubeVirt's
# 1,000 per device type, RDMA shared devices, GPU memory in GiB or MiB slices) reach tens of
# thousands in GetAllocatableResources.
MAX_DEVICE_IDS = 32_768
# Every field of the answer, whatever it is, counting each message as one and each string or
# number as one: what bounds the parsed message's size where the counts above do not look (memory
# and topology, DRA claims, unknown fields), and the time the walk takes. A 500-pod node with
# three containers per pod, each with memory manager data, is 21,100 (and 12,000 CPU IDs).
MAX_FIELDS = 500_000
# Numbers in packed fields (CPU IDs): counted in C, not walked, and 8 bytes each once decoded, so
# this many decode to 32 MiB, the receive limit. Kubelets that list a container's shared CPUs
# send hundreds per container: 5,000 pods of 2 containers on a 400-CPU node fit.
MAX_PACKED_NUMBERS = 4 * 1024 * 1024
# Kubernetes' own limits: pod names are DNS subdomains (253), namespaces and container names DNS
# labels (63), resource names qualified names (a 253-byte prefix, "/", a 63-byte name).
MAX_POD_NAME_BYTES = 253
MAX_NAMESPACE_BYTES = 63
MAX_CONTAINER_NAME_BYTES = 63
MAX_RESOURCE_NAME_BYTES = 253 + 1 + 63
# NVIDIA's longest form, MIG-GPU-<uuid>/<gi>/<ci>::<replica>, is about 60 bytes; other plugins use
# PCI addresses, device paths or hashes. A few hundred is plenty.
MAX_DEVICE_ID_BYTES = 256
# DRA (resource.k8s.io validation): claim names are DNS subdomains, driver names DNS subdomains of
# at most 63, pool names up to 252 bytes, device names DNS labels, share IDs UUIDs; fully
# qualified CDI names join a vendor/class and a device name.
MAX_DRA_NAME_BYTES = 253
MAX_DRA_DEVICES = MAX_DEVICE_IDS

_STRING_LIMITS = {
    "v1.PodResources.name": ("pod name", MAX_POD_NAME_BYTES),
    "v1.PodResources.namespace": ("namespace", MAX_NAMESPACE_BYTES),
    "v1.ContainerResources.name": ("container name", MAX_CONTAINER_NAME_BYTES),
    "v1.ContainerDevices.resource_name": ("resource name", MAX_RESOURCE_NAME_BYTES),
    "v1.ContainerDevices.device_ids": ("device ID", MAX_DEVICE_ID_BYTES),
    "v1.DynamicResource.claim_name": ("DRA claim name", MAX_DRA_NAME_BYTES),
    "v1.DynamicResource.claim_namespace": ("DRA claim namespace", MAX_NAMESPACE_BYTES),
    "v1.ClaimResource.driver_name": ("DRA driver name", 63),
    "v1.ClaimResource.pool_name": ("DRA pool name", MAX_DRA_NAME_BYTES),
    "v1.ClaimResource.device_name": ("DRA device name", 63),
    "v1.ClaimResource.share_id": ("DRA share ID", 63),
    "v1.CDIDevice.name": ("CDI device name", MAX_RESOURCE_NAME_BYTES),
}
# field -> (what it counts, bound per answer, bound per enclosing message or 0)
_COUNTS = {
    "v1.ListPodResourcesResponse.pod_resources": ("pods", MAX_PODS, 0),
    "v1.PodResources.containers": ("containers", MAX_CONTAINERS, MAX_CONTAINERS_PER_POD),
    "v1.ContainerDevices.device_ids": ("device IDs", MAX_DEVICE_IDS, 0),
    "v1.DynamicResource.claim_resources": ("DRA devices", MAX_DRA_DEVICES, 0),
}
_BY_ANSWER = {
    "List": api_pb2.ListPodResourcesResponse.DESCRIPTOR,
    "GetAllocatableResources": api_pb2.AllocatableResourcesResponse.DESCRIPTOR,
    "Get": api_pb2.GetPodResourcesResponse.DESCRIPTOR,
}

# Wire types (protobuf encoding spec).
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
# Scalar types a packed field may hold as varints; the other packable types are fixed-width.
_VARINT_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_UINT32,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_BOOL,
        FieldDescriptor.TYPE_ENUM,
    }
)
_FIXED_WIDTH = {
    FieldDescriptor.TYPE_FIXED64: 8,
    FieldDescriptor.TYPE_SFIXED64: 8,
    FieldDescriptor.TYPE_DOUBLE: 8,
    FieldDescriptor.TYPE_FIXED32: 4,
    FieldDescriptor.TYPE_SFIXED32: 4,
    FieldDescriptor.TYPE_FLOAT: 4,
}
# Bytes 0x00-0x7f end a varint, so a packed run of varints holds as many numbers as it has of them.
_CONTINUATION_BYTES = bytes(range(128, 256))


# The `code` of `podresources_errors_total` for an answer past a bound; not a gRPC status, as
# the call itself succeeded.
TOO_LARGE = "TOO_LARGE"


class AnswerTooLarge(Exception):
    """An answer past one of the bounds above; the message names the bound and what was seen."""


class AnswerMalformed(Exception):
    """Bytes that are not a protobuf message (a truncated field, an unknown wire type)."""


@dataclass(frozen=True, slots=True)
class _Rule:
    """How the walk treats one field of one message."""

    message: _Message | None = None  # a nested message to walk
    string_what: str = ""  # a string whose length is bounded
    string_limit: int = 0
    count_what: str = ""  # occurrences counted against a bound
    count_limit: int = 0
    per_parent_limit: int = 0
    packed_width: int = 0  # packed scalars: 1 for varints (counted by their last bytes), else size


@dataclass(slots=True)
class _Message:
    name: str
    rules: dict[int, _Rule] = field(default_factory=dict)
    # Nothing inside needs a look: no nested message, repeated field or bounded string. Such a
    # message decodes to one fixed-size record plus its strings' bytes, so it is not walked.
    leaf: bool = False


def _compile(descriptor: AnyDescriptor, done: dict[str, _Message]) -> _Message:
    if descriptor.full_name in done:
        return done[descriptor.full_name]
    compiled = done[descriptor.full_name] = _Message(descriptor.full_name)
    for item in descriptor.fields:
        what, limit, per_parent = _COUNTS.get(item.full_name, ("", 0, 0))
        string_what, string_limit = _STRING_LIMITS.get(item.full_name, ("", 0))
        nested = None
        # A message field always has its message_type; the None is only the stubs' other fields.
        if item.type == FieldDescriptor.TYPE_MESSAGE and item.message_type is not None:
            nested = _compile(item.message_type, done)
        width = 0
        if item.is_repeated:
            width = 1 if item.type in _VARINT_TYPES else _FIXED_WIDTH.get(item.type, 0)
        compiled.rules[item.number] = _Rule(
            nested, string_what, string_limit, what, limit, per_parent, width
        )
    compiled.leaf = not any(
        item.type == FieldDescriptor.TYPE_MESSAGE
        or item.is_repeated
        or item.full_name in _STRING_LIMITS
        for item in descriptor.fields
    )
    return compiled


_ANSWERS = {method: _compile(descriptor, {}) for method, descriptor in _BY_ANSWER.items()}


def check_answer(method: str, payload: bytes | bytearray) -> None:
    """Raise AnswerTooLarge or AnswerMalformed unless `payload`, the answer to `method`, is
    within every bound; methods without a layout here are not checked."""
    layout = _ANSWERS.get(method)
    if layout is not None:
        _Walk(payload, method).message(layout, 0, len(payload))


class _Walk:
    def __init__(self, buf: bytes | bytearray, method: str) -> None:
        self.buf = buf
        self.method = method
        self.fields = 0
        self.numbers = 0
        self.counts: dict[str, int] = {}

    def too_large(self, seen: str, limit: int, where: int) -> AnswerTooLarge:
        return AnswerTooLarge(
            f"{self.method} answer over a bound: {seen} at byte {where:,} of "
            f"{len(self.buf):,}, at most {limit:,} accepted"
        )

    def varint(self, pos: int, end: int) -> tuple[int, int]:
        buf = self.buf
        value = shift = 0
        while pos < end:
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, pos
            shift += 7
            if shift > 63:
                break
        raise AnswerMalformed(f"a bad varint before byte {pos:,}")

    def message(self, layout: _Message, pos: int, end: int) -> None:
        buf = self.buf
        rules = layout.rules
        seen_here: dict[int, int] | None = None
        while pos < end:
            self.fields += 1
            if self.fields > MAX_FIELDS:
                raise self.too_large(f"{self.fields:,} fields", MAX_FIELDS, pos)
            tag = buf[pos]
            if tag < 0x80:
                pos += 1
            else:
                tag, pos = self.varint(pos, end)
            wire = tag & 7
            if wire != _LEN:
                if wire == _VARINT:
                    while pos < end and buf[pos] >= 0x80:
                        pos += 1
                    pos += 1
                elif wire == _I64:
                    pos += 8
                elif wire == _I32:
                    pos += 4
                else:
                    raise AnswerMalformed(f"wire type {wire} at byte {pos:,}")
                continue
            length = buf[pos] if pos < end else 0x80
            if length < 0x80:
                pos += 1
            else:
                length, pos = self.varint(pos, end)
            start = pos
            pos += length
            if pos > end:
                raise AnswerMalformed(
                    f"a field of {length:,} bytes at byte {start:,} runs past the end of its "
                    f"message at byte {end:,}"
                )
            rule = rules.get(tag >> 3)
            if rule is None:
                continue  # unknown fields are kept as their bytes, which the size limit bounds
            if rule.count_what:
                if seen_here is None:
                    seen_here = {}
                self.count(rule, tag >> 3, seen_here, start)
            if length > rule.string_limit and rule.string_limit:
                raise self.too_large(
                    f"a {rule.string_what} of {length:,} bytes", rule.string_limit, start
                )
            nested = rule.message
            if nested is not None:
                if not nested.leaf:
                    self.message(nested, start, pos)
            elif rule.packed_width == 1:
                self.add_numbers(len(buf[start:pos].translate(None, _CONTINUATION_BYTES)), start)
            elif rule.packed_width:
                self.add_numbers(length // rule.packed_width, start)
        if pos > end:
            raise AnswerMalformed(f"the last field before byte {end:,} is cut short")

    def add_numbers(self, count: int, where: int) -> None:
        self.numbers += count
        if self.numbers > MAX_PACKED_NUMBERS:
            raise self.too_large(
                f"{self.numbers:,} numbers in packed fields", MAX_PACKED_NUMBERS, where
            )

    def count(self, rule: _Rule, number: int, seen_here: dict[int, int], where: int) -> None:
        total = self.counts.get(rule.count_what, 0) + 1
        self.counts[rule.count_what] = total
        if total > rule.count_limit:
            raise self.too_large(f"{total:,} {rule.count_what}", rule.count_limit, where)
        if rule.per_parent_limit:
            here = seen_here.get(number, 0) + 1
            seen_here[number] = here
            if here > rule.per_parent_limit:
                raise self.too_large(
                    f"{here:,} {rule.count_what} in one pod", rule.per_parent_limit, where
                )
