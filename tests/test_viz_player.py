"""The widgets, built and driven in plain pytest: no kernel, no browser (comm gives a dummy comm)."""
import allocator_ref as ar
from allocator_ref.viz.frames import record_frames
from allocator_ref.viz.player import Compare, LiveView, TracePlayer, user_steps

MiB = 2**20


def workload(a):
    xs = [a.malloc(size) for size in (12 * MiB, 4 * MiB, 30 * MiB, 100)]
    a.free(xs[1])
    a.free(xs[0])
    y = a.malloc(14 * MiB)
    a.free(xs[3])
    a.free(y)
    a.empty_cache()


def recorded(config=""):
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), config)
    with record_frames(a) as frames:
        workload(a)
    return frames


def test_player_steps_forward_and_back():
    frames = recorded()
    player = TracePlayer(frames, simulated=True)
    assert player.value == 0 and 'data-index="0"' in player.caption.value
    first_caption, first_picture = player.caption.value, player.picture.value
    assert "(simulated)" in first_picture
    player.controls.forward.click()
    assert player.value == 1
    assert player.caption.value != first_caption and player.picture.value != first_picture
    assert frames[1].caption in player.caption.value
    player.controls.back.click()
    assert (player.value, player.caption.value, player.picture.value) == (0, first_caption, first_picture)
    player.step(-1)                       # cannot go before the first event
    assert player.value == 0


def test_play_widget_drives_the_slider_and_the_picture():
    frames = recorded()
    player = TracePlayer(frames)
    player.controls.play.value = 3        # what the browser's Play button does on each tick
    assert player.value == 3 and 'data-index="3"' in player.caption.value
    assert 'data-step="3"' in player.curves.value
    player.controls.speed.value = 120
    assert player.controls.play.interval == 120
    player.value = len(frames) - 1
    assert "released to the driver" in player.caption.value


def test_live_view_redraws_after_each_call():
    a = ar.CachingAllocator(ar.SimDevice("tiny-1gb"), "")
    view = LiveView(a)
    assert "Ready" in view.caption.value
    x = a.malloc(5 * MiB)
    assert "5.0 MiB request" in view.caption.value and 'data-state="active_allocated"' in view.picture.value
    assert "allocated 5.0 MiB" in view.numbers.value
    a.free(x)
    assert "merged with the free block after it" in view.caption.value
    assert 'data-state="active_allocated"' not in view.picture.value
    view.close()
    a.malloc(1 * MiB)                     # no longer listening
    assert "merged" in view.caption.value


def test_compare_steps_both_sides_together():
    fa, fb = recorded(), recorded("expandable_segments:True")
    assert len(user_steps(fa)) == len(user_steps(fb)) == 9
    cmp = Compare(fa, fb, labels=("default", "expandable"), simulated=True)
    cmp.step(2)
    assert cmp.value == 2
    assert "30.0 MiB request" in cmp.captions[0].value and "30.0 MiB request" in cmp.captions[1].value
    assert 'data-step="2"' in cmp.curves.value and "expandable reserved" in cmp.curves.value
    assert "expandable" in cmp.pictures[1].value
