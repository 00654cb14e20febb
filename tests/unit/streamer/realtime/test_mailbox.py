import threading

from streamer.realtime.mailbox import FrameMailbox


def test_newest_item_wins_and_drops_are_counted() -> None:
    mailbox: FrameMailbox[int] = FrameMailbox()
    assert mailbox.put(1) is False
    assert mailbox.put(2) is True
    assert mailbox.put(3) is True
    assert mailbox.take() == 3
    assert mailbox.take() is None
    assert (mailbox.posted, mailbox.dropped, mailbox.taken) == (3, 2, 1)


def test_on_put_wakes_a_waiter() -> None:
    woken = threading.Event()
    mailbox: FrameMailbox[str] = FrameMailbox(on_put=woken.set)
    mailbox.put("frame")
    assert woken.is_set()


def test_concurrent_producer_never_loses_the_newest_item() -> None:
    mailbox: FrameMailbox[int] = FrameMailbox()
    seen: list[int] = []

    def produce() -> None:
        for value in range(5000):
            mailbox.put(value)

    producer = threading.Thread(target=produce)
    producer.start()
    while producer.is_alive():
        item = mailbox.take()
        if item is not None:
            seen.append(item)
    producer.join()
    last = mailbox.take()
    if last is not None:
        seen.append(last)
    assert seen == sorted(seen) and seen[-1] == 4999  # in order, newest never lost
    assert mailbox.dropped + mailbox.taken == mailbox.posted
