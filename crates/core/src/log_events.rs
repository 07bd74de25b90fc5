//! Every `event` the listener logs, by name: the field each of its own lines carries (the log
//! shows only lines with one, `listen::logging`), and what the tests, docs/operating.md
//! ("Logging") and anyone filtering the log depend on. Code logs `event = %log_events::NAME`; a
//! test (tests/it/docs_links.rs) checks that every name here is documented there and every name
//! documented there or as `event=NAME` in docs/ is here. One line per name, sorted.

pub const ACK: &str = "ack";
pub const AGENT_LOCK_UNAVAILABLE: &str = "agent_lock_unavailable";
pub const ALREADY_RUNNING: &str = "already_running";
pub const API_BASE_NOT_AGENTCHAT: &str = "api_base_not_agentchat";
pub const BACKLOG: &str = "backlog";
pub const BACKOFF: &str = "backoff";
pub const CAPABILITIES_REFUSED: &str = "capabilities_refused";
pub const CLOCK_JUMP: &str = "clock_jump";
pub const COALESCER_WINDOWS: &str = "coalescer_windows";
pub const CONFIG_ADVICE: &str = "config_advice";
pub const CONNECT_BUDGET: &str = "connect_budget";
pub const CONNECT_PACED: &str = "connect_paced";
pub const CYCLE_ABANDONED: &str = "cycle_abandoned";
pub const CYCLE_END: &str = "cycle_end";
pub const CYCLE_START: &str = "cycle_start";
pub const DEFAULT_PROFILE_SKIPPED: &str = "default_profile_skipped";
pub const FRAME: &str = "frame";
pub const FRAME_SKIPPED: &str = "frame_skipped";
pub const FRAMES: &str = "frames";
pub const HANDLE: &str = "handle";
pub const HANDLE_MISMATCH: &str = "handle_mismatch";
pub const HANDLE_MISMATCH_CLEARED: &str = "handle_mismatch_cleared";
pub const HELLO: &str = "hello";
pub const HISTORY_COMPACTED: &str = "history_compacted";
pub const HISTORY_UNREADABLE: &str = "history_unreadable";
pub const HISTORY_WRITE_FAILED: &str = "history_write_failed";
pub const HISTORY_WRITE_RECOVERED: &str = "history_write_recovered";
pub const HOLD_CLEARED: &str = "hold_cleared";
pub const HOST_START: &str = "host_start";
pub const HTTP_CLIENT_FAILED: &str = "http_client_failed";
pub const IDENTITY_FAILED: &str = "identity_failed";
pub const IDENTITY_SKIPPED: &str = "identity_skipped";
pub const IDENTITY_UPDATED: &str = "identity_updated";
pub const INVITE_COUNTED: &str = "invite_counted";
pub const INVITE_DISMISS_FAILED: &str = "invite_dismiss_failed";
pub const INVITE_DISMISSED: &str = "invite_dismissed";
pub const INVITE_FORGOTTEN: &str = "invite_forgotten";
pub const INVITE_MEMORY_DAMAGED: &str = "invite_memory_damaged";
pub const INVITE_MEMORY_WRITE_FAILED: &str = "invite_memory_write_failed";
pub const INVITE_MEMORY_WRITE_RECOVERED: &str = "invite_memory_write_recovered";
pub const INVITE_NOT_COUNTED: &str = "invite_not_counted";
pub const INVITE_NOT_PENDING: &str = "invite_not_pending";
pub const INVITE_SILENT_PACED: &str = "invite_silent_paced";
pub const KEY_CHANGED: &str = "key_changed";
pub const KEY_REFUSED: &str = "key_refused";
pub const KEY_RETRY: &str = "key_retry";
pub const LEFTOVER_RUN: &str = "leftover_run";
pub const LEFTOVER_RUN_STOPPED: &str = "leftover_run_stopped";
pub const LEFTOVER_RUN_UNREADABLE: &str = "leftover_run_unreadable";
pub const LISTENER_START: &str = "listener_start";
pub const LOCK_PID_UNWRITTEN: &str = "lock_pid_unwritten";
pub const LOOP_RELEASED: &str = "loop_released";
pub const METRICS_ACCEPT_FAILED: &str = "metrics_accept_failed";
pub const METRICS_BIND_FAILED: &str = "metrics_bind_failed";
pub const METRICS_CONNECTIONS_FULL: &str = "metrics_connections_full";
pub const METRICS_SERVING: &str = "metrics_serving";
pub const NO_RUN: &str = "no_run";
pub const NO_TEXTS: &str = "no_texts";
pub const OPEN_FILES_LIMIT: &str = "open_files_limit";
pub const POLICY_HELD: &str = "policy_held";
pub const POLICY_MEMORY_UNREADABLE: &str = "policy_memory_unreadable";
pub const POLICY_MEMORY_WRITE_FAILED: &str = "policy_memory_write_failed";
pub const POLICY_MEMORY_WRITE_RECOVERED: &str = "policy_memory_write_recovered";
pub const PROFILE_ADDED: &str = "profile_added";
pub const PROFILE_CONFIG_ERROR: &str = "profile_config_error";
pub const PROFILE_ENDED: &str = "profile_ended";
pub const PROFILE_NOT_RUNNING: &str = "profile_not_running";
pub const PROFILE_REMOVED: &str = "profile_removed";
pub const PROFILE_RETRY: &str = "profile_retry";
pub const PROFILE_RETRY_SCHEDULED: &str = "profile_retry_scheduled";
pub const RECHECK: &str = "recheck";
pub const RECONNECT: &str = "reconnect";
pub const RELOAD: &str = "reload";
pub const RELOAD_FAILED: &str = "reload_failed";
pub const RELOAD_PARTIAL: &str = "reload_partial";
pub const RELOADED: &str = "reloaded";
pub const ROUTE_DEPRECATED: &str = "route_deprecated";
pub const ROUTE_REMOVED: &str = "route_removed";
pub const RUN_DEQUEUED: &str = "run_dequeued";
pub const RUN_END: &str = "run_end";
pub const RUN_FAILED: &str = "run_failed";
pub const RUN_HELD: &str = "run_held";
pub const RUN_LOG_CUT: &str = "run_log_cut";
pub const RUN_LOG_UNAVAILABLE: &str = "run_log_unavailable";
pub const RUN_LOGS_PRUNE_FAILED: &str = "run_logs_prune_failed";
pub const RUN_QUEUE_MEMORY_WAIT: &str = "run_queue_memory_wait";
pub const RUN_QUEUED: &str = "run_queued";
pub const RUN_START: &str = "run_start";
pub const RUNTIME_BINARY_CHANGED: &str = "runtime_binary_changed";
pub const RUNTIME_CHECK: &str = "runtime_check";
pub const RUNTIME_PARKED: &str = "runtime_parked";
pub const RUNTIME_RECOVERED: &str = "runtime_recovered";
pub const RUNTIME_UNUSABLE: &str = "runtime_unusable";
pub const SERVER_UNREACHABLE: &str = "server_unreachable";
pub const SOCKET_CLOSED: &str = "socket_closed";
pub const SOCKET_CONNECTED: &str = "socket_connected";
pub const SOCKET_CONNECTING: &str = "socket_connecting";
pub const SOCKET_PROXY: &str = "socket_proxy";
pub const SOCKET_UPGRADED: &str = "socket_upgraded";
pub const STATE: &str = "state";
pub const STATUS_WRITE_FAILED: &str = "status_write_failed";
pub const STATUS_WRITE_RECOVERED: &str = "status_write_recovered";
pub const STOP_FORCED: &str = "stop_forced";
pub const STOP_WAITING: &str = "stop_waiting";
pub const STOPPED: &str = "stopped";
pub const STOPPING: &str = "stopping";
pub const TEST_TIME_SCALE: &str = "test_time_scale";
pub const TEXTS_CACHE_WRITE_FAILED: &str = "texts_cache_write_failed";
pub const TEXTS_CACHED: &str = "texts_cached";
pub const TEXTS_DROPPED: &str = "texts_dropped";
pub const TEXTS_FETCH_FAILED: &str = "texts_fetch_failed";
pub const TEXTS_FETCHED: &str = "texts_fetched";
pub const TEXTS_MISSING: &str = "texts_missing";
pub const TEXTS_RECOVERED: &str = "texts_recovered";
pub const TEXTS_RUNTIME_CHANGED: &str = "texts_runtime_changed";
pub const TIMEZONE_UNREADABLE: &str = "timezone_unreadable";
pub const TRAY_ENTRY_SKIPPED: &str = "tray_entry_skipped";
pub const TRAY_NOT_BEFORE: &str = "tray_not_before";
pub const TRAY_READ: &str = "tray_read";
pub const TRAY_REREAD: &str = "tray_reread";
pub const TRAY_RETRY: &str = "tray_retry";
pub const TRAY_UNREADABLE: &str = "tray_unreadable";
pub const TRAY_VERSION_UNKNOWN: &str = "tray_version_unknown";
pub const TRAY_YOU_MISMATCH: &str = "tray_you_mismatch";
pub const UPGRADE_REQUIRED: &str = "upgrade_required";
pub const WAKE: &str = "wake";
pub const WATCHDOG_DROP: &str = "watchdog_drop";
pub const WATCHDOG_WITHHELD: &str = "watchdog_withheld";

/// Every name above.
pub const ALL: &[&str] = &[
    ACK,
    AGENT_LOCK_UNAVAILABLE,
    ALREADY_RUNNING,
    API_BASE_NOT_AGENTCHAT,
    BACKLOG,
    BACKOFF,
    CAPABILITIES_REFUSED,
    CLOCK_JUMP,
    COALESCER_WINDOWS,
    CONFIG_ADVICE,
    CONNECT_BUDGET,
    CONNECT_PACED,
    CYCLE_ABANDONED,
    CYCLE_END,
    CYCLE_START,
    DEFAULT_PROFILE_SKIPPED,
    FRAME,
    FRAME_SKIPPED,
    FRAMES,
    HANDLE,
    HANDLE_MISMATCH,
    HANDLE_MISMATCH_CLEARED,
    HELLO,
    HISTORY_COMPACTED,
    HISTORY_UNREADABLE,
    HISTORY_WRITE_FAILED,
    HISTORY_WRITE_RECOVERED,
    HOLD_CLEARED,
    HOST_START,
    HTTP_CLIENT_FAILED,
    IDENTITY_FAILED,
    IDENTITY_SKIPPED,
    IDENTITY_UPDATED,
    INVITE_COUNTED,
    INVITE_DISMISS_FAILED,
    INVITE_DISMISSED,
    INVITE_FORGOTTEN,
    INVITE_MEMORY_DAMAGED,
    INVITE_MEMORY_WRITE_FAILED,
    INVITE_MEMORY_WRITE_RECOVERED,
    INVITE_NOT_COUNTED,
    INVITE_NOT_PENDING,
    INVITE_SILENT_PACED,
    KEY_CHANGED,
    KEY_REFUSED,
    KEY_RETRY,
    LEFTOVER_RUN,
    LEFTOVER_RUN_STOPPED,
    LEFTOVER_RUN_UNREADABLE,
    LISTENER_START,
    LOCK_PID_UNWRITTEN,
    LOOP_RELEASED,
    METRICS_ACCEPT_FAILED,
    METRICS_BIND_FAILED,
    METRICS_CONNECTIONS_FULL,
    METRICS_SERVING,
    NO_RUN,
    NO_TEXTS,
    OPEN_FILES_LIMIT,
    POLICY_HELD,
    POLICY_MEMORY_UNREADABLE,
    POLICY_MEMORY_WRITE_FAILED,
    POLICY_MEMORY_WRITE_RECOVERED,
    PROFILE_ADDED,
    PROFILE_CONFIG_ERROR,
    PROFILE_ENDED,
    PROFILE_NOT_RUNNING,
    PROFILE_REMOVED,
    PROFILE_RETRY,
    PROFILE_RETRY_SCHEDULED,
    RECHECK,
    RECONNECT,
    RELOAD,
    RELOAD_FAILED,
    RELOAD_PARTIAL,
    RELOADED,
    ROUTE_DEPRECATED,
    ROUTE_REMOVED,
    RUN_DEQUEUED,
    RUN_END,
    RUN_FAILED,
    RUN_HELD,
    RUN_LOG_CUT,
    RUN_LOG_UNAVAILABLE,
    RUN_LOGS_PRUNE_FAILED,
    RUN_QUEUE_MEMORY_WAIT,
    RUN_QUEUED,
    RUN_START,
    RUNTIME_BINARY_CHANGED,
    RUNTIME_CHECK,
    RUNTIME_PARKED,
    RUNTIME_RECOVERED,
    RUNTIME_UNUSABLE,
    SERVER_UNREACHABLE,
    SOCKET_CLOSED,
    SOCKET_CONNECTED,
    SOCKET_CONNECTING,
    SOCKET_PROXY,
    SOCKET_UPGRADED,
    STATE,
    STATUS_WRITE_FAILED,
    STATUS_WRITE_RECOVERED,
    STOP_FORCED,
    STOP_WAITING,
    STOPPED,
    STOPPING,
    TEST_TIME_SCALE,
    TEXTS_CACHE_WRITE_FAILED,
    TEXTS_CACHED,
    TEXTS_DROPPED,
    TEXTS_FETCH_FAILED,
    TEXTS_FETCHED,
    TEXTS_MISSING,
    TEXTS_RECOVERED,
    TEXTS_RUNTIME_CHANGED,
    TIMEZONE_UNREADABLE,
    TRAY_ENTRY_SKIPPED,
    TRAY_NOT_BEFORE,
    TRAY_READ,
    TRAY_REREAD,
    TRAY_RETRY,
    TRAY_UNREADABLE,
    TRAY_VERSION_UNKNOWN,
    TRAY_YOU_MISMATCH,
    UPGRADE_REQUIRED,
    WAKE,
    WATCHDOG_DROP,
    WATCHDOG_WITHHELD,
];
