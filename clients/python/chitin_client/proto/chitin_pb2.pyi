from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AppendRequest(_message.Message):
    __slots__ = ("stream", "request_id", "payload", "forwarded")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    FORWARDED_FIELD_NUMBER: _ClassVar[int]
    stream: str
    request_id: str
    payload: bytes
    forwarded: bool
    def __init__(self, stream: _Optional[str] = ..., request_id: _Optional[str] = ..., payload: _Optional[bytes] = ..., forwarded: _Optional[bool] = ...) -> None: ...

class AppendResponse(_message.Message):
    __slots__ = ("sequence", "epoch", "shard", "holder")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    epoch: int
    shard: str
    holder: str
    def __init__(self, sequence: _Optional[int] = ..., epoch: _Optional[int] = ..., shard: _Optional[str] = ..., holder: _Optional[str] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("stream", "limit")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    stream: str
    limit: int
    def __init__(self, stream: _Optional[str] = ..., limit: _Optional[int] = ..., **kwargs) -> None: ...

class Entry(_message.Message):
    __slots__ = ("sequence", "request_id", "payload", "epoch")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    request_id: str
    payload: bytes
    epoch: int
    def __init__(self, sequence: _Optional[int] = ..., request_id: _Optional[str] = ..., payload: _Optional[bytes] = ..., epoch: _Optional[int] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ("entries", "truncated", "next_from")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    NEXT_FROM_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    truncated: bool
    next_from: int
    def __init__(self, entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., truncated: _Optional[bool] = ..., next_from: _Optional[int] = ...) -> None: ...

class RouteRequest(_message.Message):
    __slots__ = ("application", "key")
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    application: str
    key: int
    def __init__(self, application: _Optional[str] = ..., key: _Optional[int] = ...) -> None: ...

class ShardLease(_message.Message):
    __slots__ = ("shard", "application", "holder", "holder_uuid", "holder_address", "epoch", "expires_in_ms", "parent")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    HOLDER_UUID_FIELD_NUMBER: _ClassVar[int]
    HOLDER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_IN_MS_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    shard: str
    application: str
    holder: str
    holder_uuid: str
    holder_address: str
    epoch: int
    expires_in_ms: int
    parent: str
    def __init__(self, shard: _Optional[str] = ..., application: _Optional[str] = ..., holder: _Optional[str] = ..., holder_uuid: _Optional[str] = ..., holder_address: _Optional[str] = ..., epoch: _Optional[int] = ..., expires_in_ms: _Optional[int] = ..., parent: _Optional[str] = ...) -> None: ...

class HeldRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HeldResponse(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[ShardLease]
    def __init__(self, leases: _Optional[_Iterable[_Union[ShardLease, _Mapping]]] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("acknowledges",)
    ACKNOWLEDGES_FIELD_NUMBER: _ClassVar[int]
    acknowledges: bool
    def __init__(self, acknowledges: _Optional[bool] = ...) -> None: ...

class AcknowledgeRequest(_message.Message):
    __slots__ = ("ack", "shard", "epoch")
    class Ack(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ACK_UNSPECIFIED: _ClassVar[AcknowledgeRequest.Ack]
        RELEASED: _ClassVar[AcknowledgeRequest.Ack]
        READY: _ClassVar[AcknowledgeRequest.Ack]
    ACK_UNSPECIFIED: AcknowledgeRequest.Ack
    RELEASED: AcknowledgeRequest.Ack
    READY: AcknowledgeRequest.Ack
    ACK_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ack: AcknowledgeRequest.Ack
    shard: str
    epoch: int
    def __init__(self, ack: _Optional[_Union[AcknowledgeRequest.Ack, str]] = ..., shard: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class AcknowledgeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class OwnershipEvent(_message.Message):
    __slots__ = ("kind", "shard", "epoch")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[OwnershipEvent.Kind]
        ACQUIRED: _ClassVar[OwnershipEvent.Kind]
        DRAINING: _ClassVar[OwnershipEvent.Kind]
        LOST: _ClassVar[OwnershipEvent.Kind]
    KIND_UNSPECIFIED: OwnershipEvent.Kind
    ACQUIRED: OwnershipEvent.Kind
    DRAINING: OwnershipEvent.Kind
    LOST: OwnershipEvent.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    kind: OwnershipEvent.Kind
    shard: str
    epoch: int
    def __init__(self, kind: _Optional[_Union[OwnershipEvent.Kind, str]] = ..., shard: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class WatchAssignmentsRequest(_message.Message):
    __slots__ = ("application",)
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    application: str
    def __init__(self, application: _Optional[str] = ...) -> None: ...

class Assignment(_message.Message):
    __slots__ = ("shard", "application", "lower", "upper", "state", "routable", "parent", "holder", "holder_uuid", "holder_address", "epoch")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    LOWER_FIELD_NUMBER: _ClassVar[int]
    UPPER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ROUTABLE_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    HOLDER_UUID_FIELD_NUMBER: _ClassVar[int]
    HOLDER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    shard: str
    application: str
    lower: int
    upper: int
    state: str
    routable: bool
    parent: str
    holder: str
    holder_uuid: str
    holder_address: str
    epoch: int
    def __init__(self, shard: _Optional[str] = ..., application: _Optional[str] = ..., lower: _Optional[int] = ..., upper: _Optional[int] = ..., state: _Optional[str] = ..., routable: _Optional[bool] = ..., parent: _Optional[str] = ..., holder: _Optional[str] = ..., holder_uuid: _Optional[str] = ..., holder_address: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class AssignmentUpdate(_message.Message):
    __slots__ = ("node", "version", "snapshot", "changed", "removed")
    NODE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    node: str
    version: int
    snapshot: bool
    changed: _containers.RepeatedCompositeFieldContainer[Assignment]
    removed: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, node: _Optional[str] = ..., version: _Optional[int] = ..., snapshot: _Optional[bool] = ..., changed: _Optional[_Iterable[_Union[Assignment, _Mapping]]] = ..., removed: _Optional[_Iterable[str]] = ...) -> None: ...

class LoadSample(_message.Message):
    __slots__ = ("application", "key", "shard", "ops", "bytes")
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    application: str
    key: int
    shard: str
    ops: float
    bytes: float
    def __init__(self, application: _Optional[str] = ..., key: _Optional[int] = ..., shard: _Optional[str] = ..., ops: _Optional[float] = ..., bytes: _Optional[float] = ...) -> None: ...

class ReportLoadRequest(_message.Message):
    __slots__ = ("samples",)
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    samples: _containers.RepeatedCompositeFieldContainer[LoadSample]
    def __init__(self, samples: _Optional[_Iterable[_Union[LoadSample, _Mapping]]] = ...) -> None: ...

class ReportLoadResponse(_message.Message):
    __slots__ = ("counted",)
    COUNTED_FIELD_NUMBER: _ClassVar[int]
    counted: int
    def __init__(self, counted: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeStatus(_message.Message):
    __slots__ = ("name", "uuid", "state", "address", "last_seen_ms_ago", "shards_held", "version", "protocol", "policies")
    class PoliciesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_MS_AGO_FIELD_NUMBER: _ClassVar[int]
    SHARDS_HELD_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    uuid: str
    state: str
    address: str
    last_seen_ms_ago: int
    shards_held: int
    version: str
    protocol: int
    policies: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., uuid: _Optional[str] = ..., state: _Optional[str] = ..., address: _Optional[str] = ..., last_seen_ms_ago: _Optional[int] = ..., shards_held: _Optional[int] = ..., version: _Optional[str] = ..., protocol: _Optional[int] = ..., policies: _Optional[_Mapping[str, str]] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("node", "state", "config_version", "nodes", "leases", "unowned", "insecure_listen", "cluster_policies", "policy_mismatch", "policy_fallbacks")
    class ClusterPoliciesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NODE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CONFIG_VERSION_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    UNOWNED_FIELD_NUMBER: _ClassVar[int]
    INSECURE_LISTEN_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_POLICIES_FIELD_NUMBER: _ClassVar[int]
    POLICY_MISMATCH_FIELD_NUMBER: _ClassVar[int]
    POLICY_FALLBACKS_FIELD_NUMBER: _ClassVar[int]
    node: str
    state: str
    config_version: int
    nodes: _containers.RepeatedCompositeFieldContainer[NodeStatus]
    leases: _containers.RepeatedCompositeFieldContainer[ShardLease]
    unowned: _containers.RepeatedScalarFieldContainer[str]
    insecure_listen: bool
    cluster_policies: _containers.ScalarMap[str, str]
    policy_mismatch: _containers.RepeatedScalarFieldContainer[str]
    policy_fallbacks: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, node: _Optional[str] = ..., state: _Optional[str] = ..., config_version: _Optional[int] = ..., nodes: _Optional[_Iterable[_Union[NodeStatus, _Mapping]]] = ..., leases: _Optional[_Iterable[_Union[ShardLease, _Mapping]]] = ..., unowned: _Optional[_Iterable[str]] = ..., insecure_listen: _Optional[bool] = ..., cluster_policies: _Optional[_Mapping[str, str]] = ..., policy_mismatch: _Optional[_Iterable[str]] = ..., policy_fallbacks: _Optional[_Iterable[str]] = ...) -> None: ...

class DrainRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DrainResponse(_message.Message):
    __slots__ = ("handed_over", "rounds", "kept")
    HANDED_OVER_FIELD_NUMBER: _ClassVar[int]
    ROUNDS_FIELD_NUMBER: _ClassVar[int]
    KEPT_FIELD_NUMBER: _ClassVar[int]
    handed_over: int
    rounds: int
    kept: _containers.RepeatedCompositeFieldContainer[KeptShard]
    def __init__(self, handed_over: _Optional[int] = ..., rounds: _Optional[int] = ..., kept: _Optional[_Iterable[_Union[KeptShard, _Mapping]]] = ...) -> None: ...

class KeptShard(_message.Message):
    __slots__ = ("shard", "why")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    WHY_FIELD_NUMBER: _ClassVar[int]
    shard: str
    why: str
    def __init__(self, shard: _Optional[str] = ..., why: _Optional[str] = ...) -> None: ...

class BootstrapRequest(_message.Message):
    __slots__ = ("node_id", "config_json")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    config_json: str
    def __init__(self, node_id: _Optional[str] = ..., config_json: _Optional[str] = ...) -> None: ...

class BootstrapResponse(_message.Message):
    __slots__ = ("state", "config_version")
    STATE_FIELD_NUMBER: _ClassVar[int]
    CONFIG_VERSION_FIELD_NUMBER: _ClassVar[int]
    state: str
    config_version: int
    def __init__(self, state: _Optional[str] = ..., config_version: _Optional[int] = ...) -> None: ...

class UpdateConfigRequest(_message.Message):
    __slots__ = ("config_json",)
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    config_json: str
    def __init__(self, config_json: _Optional[str] = ...) -> None: ...

class UpdateConfigResponse(_message.Message):
    __slots__ = ("config_version",)
    CONFIG_VERSION_FIELD_NUMBER: _ClassVar[int]
    config_version: int
    def __init__(self, config_version: _Optional[int] = ...) -> None: ...

class GetConfigRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetConfigResponse(_message.Message):
    __slots__ = ("config_json", "config_version", "state")
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    CONFIG_VERSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    config_json: str
    config_version: int
    state: str
    def __init__(self, config_json: _Optional[str] = ..., config_version: _Optional[int] = ..., state: _Optional[str] = ...) -> None: ...

class ReloadPoliciesRequest(_message.Message):
    __slots__ = ("adopt",)
    ADOPT_FIELD_NUMBER: _ClassVar[int]
    adopt: bool
    def __init__(self, adopt: _Optional[bool] = ...) -> None: ...

class ReloadPoliciesResponse(_message.Message):
    __slots__ = ("slots", "mismatch")
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    MISMATCH_FIELD_NUMBER: _ClassVar[int]
    slots: _containers.RepeatedScalarFieldContainer[str]
    mismatch: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, slots: _Optional[_Iterable[str]] = ..., mismatch: _Optional[_Iterable[str]] = ...) -> None: ...

class LoadRequest(_message.Message):
    __slots__ = ("shard",)
    SHARD_FIELD_NUMBER: _ClassVar[int]
    shard: str
    def __init__(self, shard: _Optional[str] = ...) -> None: ...

class RangeLoad(_message.Message):
    __slots__ = ("lower", "upper", "ops_per_sec", "bytes_per_sec")
    LOWER_FIELD_NUMBER: _ClassVar[int]
    UPPER_FIELD_NUMBER: _ClassVar[int]
    OPS_PER_SEC_FIELD_NUMBER: _ClassVar[int]
    BYTES_PER_SEC_FIELD_NUMBER: _ClassVar[int]
    lower: int
    upper: int
    ops_per_sec: float
    bytes_per_sec: float
    def __init__(self, lower: _Optional[int] = ..., upper: _Optional[int] = ..., ops_per_sec: _Optional[float] = ..., bytes_per_sec: _Optional[float] = ...) -> None: ...

class ShardLoad(_message.Message):
    __slots__ = ("shard", "ops_per_sec", "bytes_per_sec", "ranges")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    OPS_PER_SEC_FIELD_NUMBER: _ClassVar[int]
    BYTES_PER_SEC_FIELD_NUMBER: _ClassVar[int]
    RANGES_FIELD_NUMBER: _ClassVar[int]
    shard: str
    ops_per_sec: float
    bytes_per_sec: float
    ranges: _containers.RepeatedCompositeFieldContainer[RangeLoad]
    def __init__(self, shard: _Optional[str] = ..., ops_per_sec: _Optional[float] = ..., bytes_per_sec: _Optional[float] = ..., ranges: _Optional[_Iterable[_Union[RangeLoad, _Mapping]]] = ...) -> None: ...

class LoadResponse(_message.Message):
    __slots__ = ("shards",)
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    shards: _containers.RepeatedCompositeFieldContainer[ShardLoad]
    def __init__(self, shards: _Optional[_Iterable[_Union[ShardLoad, _Mapping]]] = ...) -> None: ...

class UpgradeStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GateState(_message.Message):
    __slots__ = ("name", "since", "what", "active")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    WHAT_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    name: str
    since: str
    what: str
    active: bool
    def __init__(self, name: _Optional[str] = ..., since: _Optional[str] = ..., what: _Optional[str] = ..., active: _Optional[bool] = ...) -> None: ...

class UpgradeStatusResponse(_message.Message):
    __slots__ = ("cluster_version", "node_version", "nodes", "gates", "finalize_to", "blockers")
    CLUSTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    NODE_VERSION_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    GATES_FIELD_NUMBER: _ClassVar[int]
    FINALIZE_TO_FIELD_NUMBER: _ClassVar[int]
    BLOCKERS_FIELD_NUMBER: _ClassVar[int]
    cluster_version: str
    node_version: str
    nodes: _containers.RepeatedCompositeFieldContainer[NodeStatus]
    gates: _containers.RepeatedCompositeFieldContainer[GateState]
    finalize_to: str
    blockers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cluster_version: _Optional[str] = ..., node_version: _Optional[str] = ..., nodes: _Optional[_Iterable[_Union[NodeStatus, _Mapping]]] = ..., gates: _Optional[_Iterable[_Union[GateState, _Mapping]]] = ..., finalize_to: _Optional[str] = ..., blockers: _Optional[_Iterable[str]] = ...) -> None: ...

class FinalizeUpgradeRequest(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: str
    def __init__(self, version: _Optional[str] = ...) -> None: ...

class FinalizeUpgradeResponse(_message.Message):
    __slots__ = ("cluster_version", "previous", "activated")
    CLUSTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    ACTIVATED_FIELD_NUMBER: _ClassVar[int]
    cluster_version: str
    previous: str
    activated: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cluster_version: _Optional[str] = ..., previous: _Optional[str] = ..., activated: _Optional[_Iterable[str]] = ...) -> None: ...

class DispatchRequest(_message.Message):
    __slots__ = ("target_id", "command")
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    target_id: str
    command: bytes
    def __init__(self, target_id: _Optional[str] = ..., command: _Optional[bytes] = ...) -> None: ...

class DispatchResponse(_message.Message):
    __slots__ = ("outcome", "instance_id", "fail_open_window")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    FAIL_OPEN_WINDOW_FIELD_NUMBER: _ClassVar[int]
    outcome: str
    instance_id: str
    fail_open_window: FailOpenWindow
    def __init__(self, outcome: _Optional[str] = ..., instance_id: _Optional[str] = ..., fail_open_window: _Optional[_Union[FailOpenWindow, _Mapping]] = ...) -> None: ...

class FailOpenWindow(_message.Message):
    __slots__ = ("start_unix_ms", "end_unix_ms")
    START_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    END_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    start_unix_ms: int
    end_unix_ms: int
    def __init__(self, start_unix_ms: _Optional[int] = ..., end_unix_ms: _Optional[int] = ...) -> None: ...

class TargetRequest(_message.Message):
    __slots__ = ("target_id",)
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    target_id: str
    def __init__(self, target_id: _Optional[str] = ...) -> None: ...

class OwnerResponse(_message.Message):
    __slots__ = ("owner",)
    OWNER_FIELD_NUMBER: _ClassVar[int]
    owner: str
    def __init__(self, owner: _Optional[str] = ...) -> None: ...

class InstanceRequest(_message.Message):
    __slots__ = ("instance_id",)
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    def __init__(self, instance_id: _Optional[str] = ...) -> None: ...

class TargetsResponse(_message.Message):
    __slots__ = ("targets",)
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    targets: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, targets: _Optional[_Iterable[str]] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("released",)
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: bool
    def __init__(self, released: _Optional[bool] = ...) -> None: ...

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class JsonResponse(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: str
    def __init__(self, json: _Optional[str] = ...) -> None: ...

class DeploymentStartRequest(_message.Message):
    __slots__ = ("description", "state", "message", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    description: str
    state: str
    message: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, description: _Optional[str] = ..., state: _Optional[str] = ..., message: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class DeploymentUpdateRequest(_message.Message):
    __slots__ = ("deployment_id", "state", "message", "metadata", "completed", "total")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DEPLOYMENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    deployment_id: str
    state: str
    message: str
    metadata: _containers.ScalarMap[str, str]
    completed: int
    total: int
    def __init__(self, deployment_id: _Optional[str] = ..., state: _Optional[str] = ..., message: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., completed: _Optional[int] = ..., total: _Optional[int] = ...) -> None: ...

class DeploymentFinishRequest(_message.Message):
    __slots__ = ("deployment_id", "state", "message")
    DEPLOYMENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    deployment_id: str
    state: str
    message: str
    def __init__(self, deployment_id: _Optional[str] = ..., state: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class DeploymentShowRequest(_message.Message):
    __slots__ = ("deployment_id",)
    DEPLOYMENT_ID_FIELD_NUMBER: _ClassVar[int]
    deployment_id: str
    def __init__(self, deployment_id: _Optional[str] = ...) -> None: ...

class DeploymentListRequest(_message.Message):
    __slots__ = ("active_only", "instance_id")
    ACTIVE_ONLY_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    active_only: bool
    instance_id: str
    def __init__(self, active_only: _Optional[bool] = ..., instance_id: _Optional[str] = ...) -> None: ...

class OwnershipNotice(_message.Message):
    __slots__ = ("shard", "epoch", "holder_uuid", "holder")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HOLDER_UUID_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    shard: str
    epoch: int
    holder_uuid: str
    holder: str
    def __init__(self, shard: _Optional[str] = ..., epoch: _Optional[int] = ..., holder_uuid: _Optional[str] = ..., holder: _Optional[str] = ...) -> None: ...

class NoticeAck(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeDownNotice(_message.Message):
    __slots__ = ("node_uuid", "node")
    NODE_UUID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    node_uuid: str
    node: str
    def __init__(self, node_uuid: _Optional[str] = ..., node: _Optional[str] = ...) -> None: ...
