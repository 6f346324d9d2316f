"""Pictures of the game: frames, and replays as HTML pages and GIFs.

    frame = draw_frame(state)                 # uint8 [FRAME_HEIGHT, FRAME_WIDTH, 3], one game
    write_html("replay.html", steps)          # self-contained page: board, controls, per-step panel
    write_gif("replay.gif", steps)            # the same steps as an animation with captions

`draw_frame` draws what `hm.game.render` writes as text (row 5 at the top), for humans,
for GIFs and pages, and as Gymnasium's `rgb_array` frames. Host-side Pillow code: call
it on one unbatched state, outside `jit`. See docs/replays.md.
"""

from hm.viz._frame import FRAME_HEIGHT, FRAME_WIDTH, cell_box, draw_frame, draw_image, legend
from hm.viz._replay import Step, write_gif, write_html

__all__ = ["FRAME_HEIGHT", "FRAME_WIDTH", "Step", "cell_box", "draw_frame", "draw_image", "legend", "write_gif",
           "write_html"]
