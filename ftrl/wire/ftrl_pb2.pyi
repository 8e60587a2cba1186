from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ActorState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTOR_STATE_UNSPECIFIED: _ClassVar[ActorState]
    ACTOR_PENDING: _ClassVar[ActorState]
    ACTOR_STARTING: _ClassVar[ActorState]
    ACTOR_ALIVE: _ClassVar[ActorState]
    ACTOR_RESTARTING: _ClassVar[ActorState]
    ACTOR_DEAD: _ClassVar[ActorState]

class NodeState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NODE_STATE_UNSPECIFIED: _ClassVar[NodeState]
    NODE_ALIVE: _ClassVar[NodeState]
    NODE_LOST: _ClassVar[NodeState]
    NODE_EXCLUDED: _ClassVar[NodeState]
    NODE_DRAINING: _ClassVar[NodeState]

class JobStage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STAGE_UNSPECIFIED: _ClassVar[JobStage]
    JOB_PENDING: _ClassVar[JobStage]
    JOB_STARTING: _ClassVar[JobStage]
    JOB_RUNNING: _ClassVar[JobStage]
    JOB_RECOVERING: _ClassVar[JobStage]
    JOB_FINISHED: _ClassVar[JobStage]
    JOB_STOPPED: _ClassVar[JobStage]
    JOB_FAILED: _ClassVar[JobStage]

class EventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_TYPE_UNSPECIFIED: _ClassVar[EventType]
    EVENT_CREATED: _ClassVar[EventType]
    EVENT_ALIVE: _ClassVar[EventType]
    EVENT_DIED: _ClassVar[EventType]
    EVENT_RESTARTED: _ClassVar[EventType]
    EVENT_DEAD: _ClassVar[EventType]
    EVENT_NODE_LOST: _ClassVar[EventType]
    EVENT_NODE_JOINED: _ClassVar[EventType]
    EVENT_NODE_EXCLUDED: _ClassVar[EventType]
    EVENT_JOB: _ClassVar[EventType]
    EVENT_NODE_DRAINING: _ClassVar[EventType]
    EVENT_NODE_READMITTED: _ClassVar[EventType]

class ReportKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPORT_KIND_UNSPECIFIED: _ClassVar[ReportKind]
    REPORT_STARTED: _ClassVar[ReportKind]
    REPORT_EXITED: _ClassVar[ReportKind]
    REPORT_START_FAILED: _ClassVar[ReportKind]
    REPORT_HUNG: _ClassVar[ReportKind]
    REPORT_STOPPED: _ClassVar[ReportKind]
ACTOR_STATE_UNSPECIFIED: ActorState
ACTOR_PENDING: ActorState
ACTOR_STARTING: ActorState
ACTOR_ALIVE: ActorState
ACTOR_RESTARTING: ActorState
ACTOR_DEAD: ActorState
NODE_STATE_UNSPECIFIED: NodeState
NODE_ALIVE: NodeState
NODE_LOST: NodeState
NODE_EXCLUDED: NodeState
NODE_DRAINING: NodeState
JOB_STAGE_UNSPECIFIED: JobStage
JOB_PENDING: JobStage
JOB_STARTING: JobStage
JOB_RUNNING: JobStage
JOB_RECOVERING: JobStage
JOB_FINISHED: JobStage
JOB_STOPPED: JobStage
JOB_FAILED: JobStage
EVENT_TYPE_UNSPECIFIED: EventType
EVENT_CREATED: EventType
EVENT_ALIVE: EventType
EVENT_DIED: EventType
EVENT_RESTARTED: EventType
EVENT_DEAD: EventType
EVENT_NODE_LOST: EventType
EVENT_NODE_JOINED: EventType
EVENT_NODE_EXCLUDED: EventType
EVENT_JOB: EventType
EVENT_NODE_DRAINING: EventType
EVENT_NODE_READMITTED: EventType
REPORT_KIND_UNSPECIFIED: ReportKind
REPORT_STARTED: ReportKind
REPORT_EXITED: ReportKind
REPORT_START_FAILED: ReportKind
REPORT_HUNG: ReportKind
REPORT_STOPPED: ReportKind

class ActorSpec(_message.Message):
    __slots__ = ("name", "class_path", "kwargs", "max_restarts", "resources", "owner", "max_concurrency", "env", "placement_strategy")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    CLASS_PATH_FIELD_NUMBER: _ClassVar[int]
    KWARGS_FIELD_NUMBER: _ClassVar[int]
    MAX_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    name: str
    class_path: str
    kwargs: bytes
    max_restarts: int
    resources: _containers.ScalarMap[str, float]
    owner: str
    max_concurrency: int
    env: bytes
    placement_strategy: str
    def __init__(self, name: _Optional[str] = ..., class_path: _Optional[str] = ..., kwargs: _Optional[bytes] = ..., max_restarts: _Optional[int] = ..., resources: _Optional[_Mapping[str, float]] = ..., owner: _Optional[str] = ..., max_concurrency: _Optional[int] = ..., env: _Optional[bytes] = ..., placement_strategy: _Optional[str] = ...) -> None: ...

class ActorInfo(_message.Message):
    __slots__ = ("name", "class_path", "node_id", "address", "pid", "state", "restarts", "incarnation", "owner", "death_reason", "node_epoch", "state_since", "resources", "max_restarts", "error_type", "valid_for_s")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    CLASS_PATH_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    DEATH_REASON_FIELD_NUMBER: _ClassVar[int]
    NODE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATE_SINCE_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    MAX_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    VALID_FOR_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    class_path: str
    node_id: str
    address: str
    pid: int
    state: ActorState
    restarts: int
    incarnation: int
    owner: str
    death_reason: str
    node_epoch: int
    state_since: float
    resources: _containers.ScalarMap[str, float]
    max_restarts: int
    error_type: str
    valid_for_s: float
    def __init__(self, name: _Optional[str] = ..., class_path: _Optional[str] = ..., node_id: _Optional[str] = ..., address: _Optional[str] = ..., pid: _Optional[int] = ..., state: _Optional[_Union[ActorState, str]] = ..., restarts: _Optional[int] = ..., incarnation: _Optional[int] = ..., owner: _Optional[str] = ..., death_reason: _Optional[str] = ..., node_epoch: _Optional[int] = ..., state_since: _Optional[float] = ..., resources: _Optional[_Mapping[str, float]] = ..., max_restarts: _Optional[int] = ..., error_type: _Optional[str] = ..., valid_for_s: _Optional[float] = ...) -> None: ...

class NodeInfo(_message.Message):
    __slots__ = ("node_id", "address", "state", "resources", "available", "slots", "actors", "failures", "last_heartbeat_age_s", "epoch", "hostname", "pid", "connected", "log_port")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class AvailableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    ACTORS_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_AGE_S_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    LOG_PORT_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    address: str
    state: NodeState
    resources: _containers.ScalarMap[str, float]
    available: _containers.ScalarMap[str, float]
    slots: int
    actors: _containers.RepeatedScalarFieldContainer[str]
    failures: int
    last_heartbeat_age_s: float
    epoch: int
    hostname: str
    pid: int
    connected: bool
    log_port: int
    def __init__(self, node_id: _Optional[str] = ..., address: _Optional[str] = ..., state: _Optional[_Union[NodeState, str]] = ..., resources: _Optional[_Mapping[str, float]] = ..., available: _Optional[_Mapping[str, float]] = ..., slots: _Optional[int] = ..., actors: _Optional[_Iterable[str]] = ..., failures: _Optional[int] = ..., last_heartbeat_age_s: _Optional[float] = ..., epoch: _Optional[int] = ..., hostname: _Optional[str] = ..., pid: _Optional[int] = ..., connected: _Optional[bool] = ..., log_port: _Optional[int] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("seq", "type", "actor", "node_id", "incarnation", "at", "message")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    seq: int
    type: EventType
    actor: str
    node_id: str
    incarnation: int
    at: float
    message: str
    def __init__(self, seq: _Optional[int] = ..., type: _Optional[_Union[EventType, str]] = ..., actor: _Optional[str] = ..., node_id: _Optional[str] = ..., incarnation: _Optional[int] = ..., at: _Optional[float] = ..., message: _Optional[str] = ...) -> None: ...

class RunningActor(_message.Message):
    __slots__ = ("spec", "incarnation", "pid", "address", "node_epoch", "restarts", "local_until")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    NODE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    LOCAL_UNTIL_FIELD_NUMBER: _ClassVar[int]
    spec: ActorSpec
    incarnation: int
    pid: int
    address: str
    node_epoch: int
    restarts: int
    local_until: int
    def __init__(self, spec: _Optional[_Union[ActorSpec, _Mapping]] = ..., incarnation: _Optional[int] = ..., pid: _Optional[int] = ..., address: _Optional[str] = ..., node_epoch: _Optional[int] = ..., restarts: _Optional[int] = ..., local_until: _Optional[int] = ...) -> None: ...

class RegisterNodeRequest(_message.Message):
    __slots__ = ("node_id", "session_id", "address", "resources", "slots", "running", "hostname", "pid", "version", "previous_epoch", "log_port")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOG_PORT_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    session_id: str
    address: str
    resources: _containers.ScalarMap[str, float]
    slots: int
    running: _containers.RepeatedCompositeFieldContainer[RunningActor]
    hostname: str
    pid: int
    version: str
    previous_epoch: int
    log_port: int
    def __init__(self, node_id: _Optional[str] = ..., session_id: _Optional[str] = ..., address: _Optional[str] = ..., resources: _Optional[_Mapping[str, float]] = ..., slots: _Optional[int] = ..., running: _Optional[_Iterable[_Union[RunningActor, _Mapping]]] = ..., hostname: _Optional[str] = ..., pid: _Optional[int] = ..., version: _Optional[str] = ..., previous_epoch: _Optional[int] = ..., log_port: _Optional[int] = ...) -> None: ...

class StopActor(_message.Message):
    __slots__ = ("name", "incarnation", "reason", "fenced", "drain")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    name: str
    incarnation: int
    reason: str
    fenced: bool
    drain: bool
    def __init__(self, name: _Optional[str] = ..., incarnation: _Optional[int] = ..., reason: _Optional[str] = ..., fenced: _Optional[bool] = ..., drain: _Optional[bool] = ...) -> None: ...

class RegisterNodeReply(_message.Message):
    __slots__ = ("node_epoch", "heartbeat_interval_s", "heartbeat_timeout_s", "stop", "coordinator_id", "restart_backoff_base_s", "restart_backoff_cap_s", "quick_crash_s")
    NODE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    RESTART_BACKOFF_BASE_S_FIELD_NUMBER: _ClassVar[int]
    RESTART_BACKOFF_CAP_S_FIELD_NUMBER: _ClassVar[int]
    QUICK_CRASH_S_FIELD_NUMBER: _ClassVar[int]
    node_epoch: int
    heartbeat_interval_s: float
    heartbeat_timeout_s: float
    stop: _containers.RepeatedCompositeFieldContainer[StopActor]
    coordinator_id: str
    restart_backoff_base_s: float
    restart_backoff_cap_s: float
    quick_crash_s: float
    def __init__(self, node_epoch: _Optional[int] = ..., heartbeat_interval_s: _Optional[float] = ..., heartbeat_timeout_s: _Optional[float] = ..., stop: _Optional[_Iterable[_Union[StopActor, _Mapping]]] = ..., coordinator_id: _Optional[str] = ..., restart_backoff_base_s: _Optional[float] = ..., restart_backoff_cap_s: _Optional[float] = ..., quick_crash_s: _Optional[float] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("seq", "num_actors")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    NUM_ACTORS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    num_actors: int
    def __init__(self, seq: _Optional[int] = ..., num_actors: _Optional[int] = ...) -> None: ...

class ActorReport(_message.Message):
    __slots__ = ("name", "incarnation", "kind", "pid", "address", "exit_code", "reason", "error_type", "restarting_locally", "next_incarnation", "at")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESTARTING_LOCALLY_FIELD_NUMBER: _ClassVar[int]
    NEXT_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    name: str
    incarnation: int
    kind: ReportKind
    pid: int
    address: str
    exit_code: int
    reason: str
    error_type: str
    restarting_locally: bool
    next_incarnation: int
    at: float
    def __init__(self, name: _Optional[str] = ..., incarnation: _Optional[int] = ..., kind: _Optional[_Union[ReportKind, str]] = ..., pid: _Optional[int] = ..., address: _Optional[str] = ..., exit_code: _Optional[int] = ..., reason: _Optional[str] = ..., error_type: _Optional[str] = ..., restarting_locally: _Optional[bool] = ..., next_incarnation: _Optional[int] = ..., at: _Optional[float] = ...) -> None: ...

class NodeMessage(_message.Message):
    __slots__ = ("node_id", "epoch", "heartbeat", "report", "drain")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    epoch: int
    heartbeat: Heartbeat
    report: ActorReport
    drain: Drain
    def __init__(self, node_id: _Optional[str] = ..., epoch: _Optional[int] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., report: _Optional[_Union[ActorReport, _Mapping]] = ..., drain: _Optional[_Union[Drain, _Mapping]] = ...) -> None: ...

class Drain(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class StartActor(_message.Message):
    __slots__ = ("spec", "incarnation", "restarts", "delay_s", "local_until")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    DELAY_S_FIELD_NUMBER: _ClassVar[int]
    LOCAL_UNTIL_FIELD_NUMBER: _ClassVar[int]
    spec: ActorSpec
    incarnation: int
    restarts: int
    delay_s: float
    local_until: int
    def __init__(self, spec: _Optional[_Union[ActorSpec, _Mapping]] = ..., incarnation: _Optional[int] = ..., restarts: _Optional[int] = ..., delay_s: _Optional[float] = ..., local_until: _Optional[int] = ...) -> None: ...

class HeartbeatAck(_message.Message):
    __slots__ = ("seq",)
    SEQ_FIELD_NUMBER: _ClassVar[int]
    seq: int
    def __init__(self, seq: _Optional[int] = ...) -> None: ...

class CoordinatorMessage(_message.Message):
    __slots__ = ("ack", "start", "stop", "shutdown")
    ACK_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    ack: HeartbeatAck
    start: StartActor
    stop: StopActor
    shutdown: str
    def __init__(self, ack: _Optional[_Union[HeartbeatAck, _Mapping]] = ..., start: _Optional[_Union[StartActor, _Mapping]] = ..., stop: _Optional[_Union[StopActor, _Mapping]] = ..., shutdown: _Optional[str] = ...) -> None: ...

class CreateActorRequest(_message.Message):
    __slots__ = ("spec", "get_if_exists")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    GET_IF_EXISTS_FIELD_NUMBER: _ClassVar[int]
    spec: ActorSpec
    get_if_exists: bool
    def __init__(self, spec: _Optional[_Union[ActorSpec, _Mapping]] = ..., get_if_exists: _Optional[bool] = ...) -> None: ...

class ActorName(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class KillActorRequest(_message.Message):
    __slots__ = ("name", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    reason: str
    def __init__(self, name: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class KillActorReply(_message.Message):
    __slots__ = ("actor",)
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    actor: ActorInfo
    def __init__(self, actor: _Optional[_Union[ActorInfo, _Mapping]] = ...) -> None: ...

class GetActorRequest(_message.Message):
    __slots__ = ("name", "wait_s", "min_incarnation")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    MIN_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    name: str
    wait_s: float
    min_incarnation: int
    def __init__(self, name: _Optional[str] = ..., wait_s: _Optional[float] = ..., min_incarnation: _Optional[int] = ...) -> None: ...

class ListActorsRequest(_message.Message):
    __slots__ = ("prefix",)
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    def __init__(self, prefix: _Optional[str] = ...) -> None: ...

class ListActorsReply(_message.Message):
    __slots__ = ("actors",)
    ACTORS_FIELD_NUMBER: _ClassVar[int]
    actors: _containers.RepeatedCompositeFieldContainer[ActorInfo]
    def __init__(self, actors: _Optional[_Iterable[_Union[ActorInfo, _Mapping]]] = ...) -> None: ...

class ListNodesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListNodesReply(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeInfo]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeInfo, _Mapping]]] = ...) -> None: ...

class WatchEventsRequest(_message.Message):
    __slots__ = ("prefix", "after_seq", "nodes", "replay")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    REPLAY_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    after_seq: int
    nodes: bool
    replay: bool
    def __init__(self, prefix: _Optional[str] = ..., after_seq: _Optional[int] = ..., nodes: _Optional[bool] = ..., replay: _Optional[bool] = ...) -> None: ...

class ClusterInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClusterInfo(_message.Message):
    __slots__ = ("coordinator_id", "version", "uptime_s", "heartbeat_interval_s", "heartbeat_timeout_s", "max_node_failures", "event_seq")
    COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    MAX_NODE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    EVENT_SEQ_FIELD_NUMBER: _ClassVar[int]
    coordinator_id: str
    version: str
    uptime_s: float
    heartbeat_interval_s: float
    heartbeat_timeout_s: float
    max_node_failures: int
    event_seq: int
    def __init__(self, coordinator_id: _Optional[str] = ..., version: _Optional[str] = ..., uptime_s: _Optional[float] = ..., heartbeat_interval_s: _Optional[float] = ..., heartbeat_timeout_s: _Optional[float] = ..., max_node_failures: _Optional[int] = ..., event_seq: _Optional[int] = ...) -> None: ...

class JobInfo(_message.Message):
    __slots__ = ("job_id", "stage", "iteration", "env_steps_sampled", "metrics", "reason", "output_dir", "config", "num_env_runners", "num_learners", "stop_requested", "submitted_at", "stage_since", "last_checkpoint", "seq", "resume", "actors", "driver_incarnation")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    ENV_STEPS_SAMPLED_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_DIR_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    NUM_ENV_RUNNERS_FIELD_NUMBER: _ClassVar[int]
    NUM_LEARNERS_FIELD_NUMBER: _ClassVar[int]
    STOP_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    STAGE_SINCE_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    ACTORS_FIELD_NUMBER: _ClassVar[int]
    DRIVER_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    stage: JobStage
    iteration: int
    env_steps_sampled: int
    metrics: bytes
    reason: str
    output_dir: str
    config: bytes
    num_env_runners: int
    num_learners: int
    stop_requested: bool
    submitted_at: float
    stage_since: float
    last_checkpoint: str
    seq: int
    resume: bool
    actors: _containers.RepeatedScalarFieldContainer[str]
    driver_incarnation: int
    def __init__(self, job_id: _Optional[str] = ..., stage: _Optional[_Union[JobStage, str]] = ..., iteration: _Optional[int] = ..., env_steps_sampled: _Optional[int] = ..., metrics: _Optional[bytes] = ..., reason: _Optional[str] = ..., output_dir: _Optional[str] = ..., config: _Optional[bytes] = ..., num_env_runners: _Optional[int] = ..., num_learners: _Optional[int] = ..., stop_requested: _Optional[bool] = ..., submitted_at: _Optional[float] = ..., stage_since: _Optional[float] = ..., last_checkpoint: _Optional[str] = ..., seq: _Optional[int] = ..., resume: _Optional[bool] = ..., actors: _Optional[_Iterable[str]] = ..., driver_incarnation: _Optional[int] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("job_id", "config", "output_dir", "resume")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_DIR_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    config: bytes
    output_dir: str
    resume: bool
    def __init__(self, job_id: _Optional[str] = ..., config: _Optional[bytes] = ..., output_dir: _Optional[str] = ..., resume: _Optional[bool] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id", "wait_s", "after_seq")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    wait_s: float
    after_seq: int
    def __init__(self, job_id: _Optional[str] = ..., wait_s: _Optional[float] = ..., after_seq: _Optional[int] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListJobsReply(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobInfo]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobInfo, _Mapping]]] = ...) -> None: ...

class ScaleJobRequest(_message.Message):
    __slots__ = ("job_id", "num_env_runners", "num_learners")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_ENV_RUNNERS_FIELD_NUMBER: _ClassVar[int]
    NUM_LEARNERS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    num_env_runners: int
    num_learners: int
    def __init__(self, job_id: _Optional[str] = ..., num_env_runners: _Optional[int] = ..., num_learners: _Optional[int] = ...) -> None: ...

class StopJobRequest(_message.Message):
    __slots__ = ("job_id", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class JobResultsRequest(_message.Message):
    __slots__ = ("job_id", "after_iteration", "follow")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_ITERATION_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    after_iteration: int
    follow: bool
    def __init__(self, job_id: _Optional[str] = ..., after_iteration: _Optional[int] = ..., follow: _Optional[bool] = ...) -> None: ...

class JobResult(_message.Message):
    __slots__ = ("iteration", "row")
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    ROW_FIELD_NUMBER: _ClassVar[int]
    iteration: int
    row: bytes
    def __init__(self, iteration: _Optional[int] = ..., row: _Optional[bytes] = ...) -> None: ...

class JobReport(_message.Message):
    __slots__ = ("job_id", "incarnation", "stage", "iteration", "env_steps_sampled", "rows", "last_checkpoint", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    ENV_STEPS_SAMPLED_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    incarnation: int
    stage: JobStage
    iteration: int
    env_steps_sampled: int
    rows: _containers.RepeatedCompositeFieldContainer[JobResult]
    last_checkpoint: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., incarnation: _Optional[int] = ..., stage: _Optional[_Union[JobStage, str]] = ..., iteration: _Optional[int] = ..., env_steps_sampled: _Optional[int] = ..., rows: _Optional[_Iterable[_Union[JobResult, _Mapping]]] = ..., last_checkpoint: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ReadmitNodeRequest(_message.Message):
    __slots__ = ("node_id",)
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    def __init__(self, node_id: _Optional[str] = ...) -> None: ...

class MeshMember(_message.Message):
    __slots__ = ("name", "incarnation", "store_address", "host", "rank")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    STORE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    name: str
    incarnation: int
    store_address: str
    host: str
    rank: int
    def __init__(self, name: _Optional[str] = ..., incarnation: _Optional[int] = ..., store_address: _Optional[str] = ..., host: _Optional[str] = ..., rank: _Optional[int] = ...) -> None: ...

class MeshView(_message.Message):
    __slots__ = ("group", "epoch", "members", "waiting", "store_prefix", "config_hash", "reason", "seq", "formed_at")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    STORE_PREFIX_FIELD_NUMBER: _ClassVar[int]
    CONFIG_HASH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    FORMED_AT_FIELD_NUMBER: _ClassVar[int]
    group: str
    epoch: int
    members: _containers.RepeatedCompositeFieldContainer[MeshMember]
    waiting: _containers.RepeatedCompositeFieldContainer[MeshMember]
    store_prefix: str
    config_hash: str
    reason: str
    seq: int
    formed_at: float
    def __init__(self, group: _Optional[str] = ..., epoch: _Optional[int] = ..., members: _Optional[_Iterable[_Union[MeshMember, _Mapping]]] = ..., waiting: _Optional[_Iterable[_Union[MeshMember, _Mapping]]] = ..., store_prefix: _Optional[str] = ..., config_hash: _Optional[str] = ..., reason: _Optional[str] = ..., seq: _Optional[int] = ..., formed_at: _Optional[float] = ...) -> None: ...

class JoinMeshRequest(_message.Message):
    __slots__ = ("group", "member", "incarnation", "store_address", "host", "config_hash", "last_epoch")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    STORE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    CONFIG_HASH_FIELD_NUMBER: _ClassVar[int]
    LAST_EPOCH_FIELD_NUMBER: _ClassVar[int]
    group: str
    member: str
    incarnation: int
    store_address: str
    host: str
    config_hash: str
    last_epoch: int
    def __init__(self, group: _Optional[str] = ..., member: _Optional[str] = ..., incarnation: _Optional[int] = ..., store_address: _Optional[str] = ..., host: _Optional[str] = ..., config_hash: _Optional[str] = ..., last_epoch: _Optional[int] = ...) -> None: ...

class GetMeshRequest(_message.Message):
    __slots__ = ("group", "wait_s", "after_seq")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    group: str
    wait_s: float
    after_seq: int
    def __init__(self, group: _Optional[str] = ..., wait_s: _Optional[float] = ..., after_seq: _Optional[int] = ...) -> None: ...

class FormMeshRequest(_message.Message):
    __slots__ = ("group", "expected_epoch", "min_size", "remove", "reason", "reform")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MIN_SIZE_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REFORM_FIELD_NUMBER: _ClassVar[int]
    group: str
    expected_epoch: int
    min_size: int
    remove: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    reform: bool
    def __init__(self, group: _Optional[str] = ..., expected_epoch: _Optional[int] = ..., min_size: _Optional[int] = ..., remove: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ..., reform: _Optional[bool] = ...) -> None: ...

class LeaveMeshRequest(_message.Message):
    __slots__ = ("group", "member", "reason")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    group: str
    member: str
    reason: str
    def __init__(self, group: _Optional[str] = ..., member: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ListMeshesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListMeshesReply(_message.Message):
    __slots__ = ("meshes",)
    MESHES_FIELD_NUMBER: _ClassVar[int]
    meshes: _containers.RepeatedCompositeFieldContainer[MeshView]
    def __init__(self, meshes: _Optional[_Iterable[_Union[MeshView, _Mapping]]] = ...) -> None: ...

class CallHeader(_message.Message):
    __slots__ = ("method", "incarnation", "total_bytes", "caller")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    method: str
    incarnation: int
    total_bytes: int
    caller: str
    def __init__(self, method: _Optional[str] = ..., incarnation: _Optional[int] = ..., total_bytes: _Optional[int] = ..., caller: _Optional[str] = ...) -> None: ...

class RemoteError(_message.Message):
    __slots__ = ("type", "message", "traceback")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    type: str
    message: str
    traceback: str
    def __init__(self, type: _Optional[str] = ..., message: _Optional[str] = ..., traceback: _Optional[str] = ...) -> None: ...

class CallChunk(_message.Message):
    __slots__ = ("header", "data", "error", "total_bytes")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    header: CallHeader
    data: bytes
    error: RemoteError
    total_bytes: int
    def __init__(self, header: _Optional[_Union[CallHeader, _Mapping]] = ..., data: _Optional[bytes] = ..., error: _Optional[_Union[RemoteError, _Mapping]] = ..., total_bytes: _Optional[int] = ...) -> None: ...

class PingRequest(_message.Message):
    __slots__ = ("incarnation",)
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    incarnation: int
    def __init__(self, incarnation: _Optional[int] = ...) -> None: ...

class PingReply(_message.Message):
    __slots__ = ("name", "incarnation", "pid", "calls_in_flight", "uptime_s")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    CALLS_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    incarnation: int
    pid: int
    calls_in_flight: int
    uptime_s: float
    def __init__(self, name: _Optional[str] = ..., incarnation: _Optional[int] = ..., pid: _Optional[int] = ..., calls_in_flight: _Optional[int] = ..., uptime_s: _Optional[float] = ...) -> None: ...

class ReadLogRequest(_message.Message):
    __slots__ = ("name", "tail_lines", "follow", "max_seconds", "offset")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TAIL_LINES_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    MAX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    name: str
    tail_lines: int
    follow: bool
    max_seconds: float
    offset: int
    def __init__(self, name: _Optional[str] = ..., tail_lines: _Optional[int] = ..., follow: _Optional[bool] = ..., max_seconds: _Optional[float] = ..., offset: _Optional[int] = ...) -> None: ...

class LogChunk(_message.Message):
    __slots__ = ("data", "rotated", "offset")
    DATA_FIELD_NUMBER: _ClassVar[int]
    ROTATED_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    rotated: bool
    offset: int
    def __init__(self, data: _Optional[bytes] = ..., rotated: _Optional[bool] = ..., offset: _Optional[int] = ...) -> None: ...
