"""ProgressBar: a bar redrawn in place on a terminal (a shorter redraw blanks the longer one's tail, the
last one ends the line), plain throttled lines elsewhere."""

import io

from models.downloader import ProgressBar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_on_a_terminal_a_bar_is_redrawn_in_place() -> None:
    stream, clock = Terminal(), Clock()
    progress = ProgressBar("swap clip.mp4", stream, clock=clock, unit="frames")
    clock.now += 1.0
    progress.update(50, 200)
    clock.now += 1.0
    progress.update(100, 200)
    progress.finish(200, 200)
    draws = stream.getvalue().split("\r")[1:]
    half = "#" * (ProgressBar.BAR_WIDTH // 4) + "-" * (ProgressBar.BAR_WIDTH * 3 // 4)
    assert draws[0] == f"swap clip.mp4 [{half}]  25.0% 50/200 frames 50.0 frames/s, 3 s left"
    assert draws[1].startswith("swap clip.mp4 [" + "#" * (ProgressBar.BAR_WIDTH // 2))
    assert draws[1].rstrip().endswith("50.0 frames/s, 2 s left")
    final = draws[2]
    assert final.startswith(f"swap clip.mp4 [{'#' * ProgressBar.BAR_WIDTH}] 100.0% 200/200 frames")
    assert final.endswith("\n") and "left" not in final
    assert len(final.rstrip("\n")) >= len(draws[1])  # nothing of the previous draw is left showing
    assert stream.getvalue().count("\n") == 1  # one line in the end, not one per redraw


def test_a_shorter_redraw_blanks_the_tail_of_the_longer_one() -> None:
    stream, clock = Terminal(), Clock()
    progress = ProgressBar("x", stream, clock=clock, unit="frames", interval_s=0.0)
    clock.now += 0.001
    progress.update(1, 1000)  # a huge rate and an estimate: a long line
    clock.now += 100.0
    progress.update(2, 1000)
    first, second = stream.getvalue().split("\r")[1:]
    assert len(second) >= len(first)


def test_off_a_terminal_plain_throttled_lines() -> None:
    stream, clock = io.StringIO(), Clock()
    progress = ProgressBar("swap clip.mp4", stream, clock=clock, unit="frames")
    for done in range(1, 101):
        clock.now += 0.25
        progress.update(done, 100)
    progress.finish(100, 100)
    lines = stream.getvalue().splitlines(keepends=True)
    assert "\r" not in stream.getvalue() and "[" not in stream.getvalue()
    assert len(lines) == 6  # at 0.25 s, then every 5 s until 25 s (5 lines), and the last
    assert lines[-1] == "swap clip.mp4: 100.0% 100/100 frames 4.0 frames/s\n"
