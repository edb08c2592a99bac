"""MuJoCo's GL backend: EGL for headless rendering only where libEGL exists; elsewhere `import mujoco` must not be
made to fail (a slim container image has no libEGL, and a run that never renders must still start)."""

from rl.envs.bullet import headless_gl


def found(name):
    return f"lib{name}.so.1"


def missing(name):
    return None


def test_egl_without_a_display_where_libegl_exists():
    assert headless_gl({}, found) == "egl"


def test_no_egl_where_libegl_is_missing():
    assert headless_gl({}, missing) is None


def test_the_users_setting_and_a_display_are_left_alone():
    assert headless_gl({"MUJOCO_GL": "osmesa"}, found) is None
    assert headless_gl({"DISPLAY": ":0"}, found) is None
    assert headless_gl({"WAYLAND_DISPLAY": "wayland-0"}, found) is None
