"""The kinds of the marks (K lines) that vramtrace's start-up hook writes, in the order of
common/side_channel.h's VRAMTRACE_SIDE_MARKS (tests/hook/side_channel_test.py checks)."""
(_MOD, _MOD_END, _FWD, _FWD_EVAL, _FWD_END, _BWD, _BWD_END, _STEP, _STEP_END, _SITE, _OOM,
 _FWD_EVAL_GRAD, _MOVE, _MOVE_END, _NAMED, _FED_BACK) = range(16)
# A LaunchesStopped record's reason when the hook stops them (common/records.h, StopReason).
_STOPPED_BY_HOOK = 1
