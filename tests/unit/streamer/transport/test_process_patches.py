"""TransportPatches: every option set explicitly while applied, and exactly the earlier state back after."""

from collections.abc import Iterator

import aioice.ice
import aiortc.rtcrtpsender
import pytest
from aiortc.jitterbuffer import JitterBuffer
from aiortc.rtcicetransport import RTCIceGatherer

from streamer.transport.codec_tuning import get_tuned_encoder
from streamer.transport.ice_addresses import current_host_addresses, restrict_ice_addresses
from streamer.transport.ice_host_candidates import PortRange
from streamer.transport.jitter_marker import is_marker_release_installed
from streamer.transport.process_patches import PATCHED_ATTRIBUTES, TransportPatches, restore, snapshot


def _state() -> list[object]:
    return [vars(owner).get(name) for owner, name in PATCHED_ATTRIBUTES]


@pytest.fixture(autouse=True)
def loopback_afterwards() -> Iterator[None]:
    before = snapshot()
    yield
    restore(before)
    restrict_ice_addresses(["127.0.0.1"])  # the rest of the run stays on loopback (DESIGN.md section 7)


def test_apply_sets_every_option_and_revert_puts_back_what_was_there() -> None:
    restrict_ice_addresses(["127.0.0.3"])  # what a test client had set before the app started
    before = _state()
    patches = TransportPatches(("127.0.0.1",), PortRange(50000, 50009), "203.0.113.7")
    with patches:
        assert patches.applied and current_host_addresses() == ["127.0.0.1"]
        assert is_marker_release_installed() and aiortc.rtcrtpsender.get_encoder is get_tuned_encoder
        assert vars(aioice.ice.Connection)["get_component_candidates"] is not before[4]
        assert vars(RTCIceGatherer)["getLocalCandidates"] is not before[5]
    assert not patches.applied and _state() == before and current_host_addresses() == ["127.0.0.3"]
    patches.revert()  # idempotent
    assert _state() == before


def test_an_app_without_restrictions_does_not_inherit_another_apps() -> None:
    with TransportPatches(("127.0.0.1",), PortRange(50000, 50009), "203.0.113.7"):
        inside_first = _state()
        with TransportPatches():  # a second app in the process, no ICE options
            assert aioice.ice.get_host_addresses is not inside_first[3]  # aioice's own choice again
            assert vars(aioice.ice.Connection)["get_component_candidates"] is not inside_first[4]
            assert vars(RTCIceGatherer)["getLocalCandidates"] is not inside_first[5]
        assert _state() == inside_first  # the first app's rules are back once the second one ends


def test_the_jitter_fix_goes_when_nothing_had_it_before() -> None:
    from streamer.transport import jitter_marker

    JitterBuffer._remove_frame = jitter_marker._ORIGINAL_REMOVE_FRAME  # type: ignore[method-assign,assignment]
    if jitter_marker.PATCH_FLAG in vars(JitterBuffer):
        delattr(JitterBuffer, jitter_marker.PATCH_FLAG)
    assert not is_marker_release_installed()
    with TransportPatches(("127.0.0.1",)):
        assert is_marker_release_installed()
    assert not is_marker_release_installed()


def test_apply_twice_is_a_bug() -> None:
    patches = TransportPatches(("127.0.0.1",))
    with patches, pytest.raises(RuntimeError):
        patches.apply()


def test_the_loss_recovery_and_path_liveness_taps_go_when_nothing_had_them_before() -> None:
    from aioice.ice import StunProtocol
    from aiortc.rtcrtpreceiver import RTCRtpReceiver

    from streamer.transport import jitter_recovery, path_liveness

    for owner, name, original in (
        (JitterBuffer, "add", jitter_recovery._ORIGINAL_ADD),
        (RTCRtpReceiver, "_send_rtcp_pli", jitter_recovery._ORIGINAL_SEND_PLI),
        (StunProtocol, "datagram_received", path_liveness._ORIGINAL_DATAGRAM_RECEIVED),
        (StunProtocol, "error_received", path_liveness._ORIGINAL_ERROR_RECEIVED),
        (StunProtocol, "connection_made", path_liveness._ORIGINAL_CONNECTION_MADE),
    ):
        setattr(owner, name, original)
    for owner, flag in (
        (JitterBuffer, jitter_recovery.RECOVERY_FLAG),
        (StunProtocol, path_liveness.LIVENESS_FLAG),
    ):
        if flag in vars(owner):
            delattr(owner, flag)
    with TransportPatches(("127.0.0.1",)):
        assert JitterBuffer.add is jitter_recovery.add_with_hole_timeout
        assert RTCRtpReceiver._send_rtcp_pli is jitter_recovery.send_rate_limited_pli
        assert StunProtocol.error_received is path_liveness._error_received
    assert JitterBuffer.add is jitter_recovery._ORIGINAL_ADD
    assert RTCRtpReceiver._send_rtcp_pli is jitter_recovery._ORIGINAL_SEND_PLI
    assert StunProtocol.datagram_received is path_liveness._ORIGINAL_DATAGRAM_RECEIVED
    assert not getattr(StunProtocol, path_liveness.LIVENESS_FLAG, False)
