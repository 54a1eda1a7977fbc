# SPDX-License-Identifier: MIT
"""nvswap.Config: loading, the sections as dicts, errors with positions."""
import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest

import nvswap


def nvme_config(path, **param):
    section = {"device": "nvme", "nvme_path": path}
    section.update(param)
    return {"zero_optimization": {"offload_param": section}}


def test_an_empty_config_has_deepspeeds_defaults():
    c = nvswap.Config.from_str("{}")
    assert c.offload("param") == {
        "present": False,
        "device": "none",
        "nvme_path": None,
        "buffer_count": 5,
        "buffer_size": 100000000,
        "max_in_cpu": 1000000000,
        "pin_memory": True,
        "pipeline_read": False,
        "pipeline_write": False,
    }
    assert c.offload("optimizer")["buffer_count"] == 4
    assert c.aio_options() == {
        "block_size": 1048576,
        "queue_depth": 8,
        "single_submit": False,
        "overlap_events": True,
        "intra_op_parallelism": 1,
        "backend": "auto",
    }
    assert c.nvswap_options() == {
        "backend": "auto",
        "stripe_size": 1 << 20,
        "checksum": False,
        "page_cache": False,
        "auto_evict": True,
        "nvme_paths": [],
        "wait_ms": 60000,
        "lookahead": 1,
        "persist": "scratch",
        "keep_generations": 2,
        "rank": None,
        "node_queue_depth": 0,
        "split_queue_depth": True,
    }
    assert c.use_gds is False
    assert c.warnings == []
    assert c.source is None


def test_every_key_of_the_sections_reaches_the_dicts(swapdir):
    other = os.path.join(swapdir, "b")
    os.mkdir(other)
    cfg = nvme_config(
        swapdir,
        buffer_count=3,
        buffer_size=1000,
        max_in_cpu=0,
        pin_memory=False,
        pipeline_read=True,
        pipeline_write=True,
    )
    cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    cfg["aio"] = {
        "block_size": 262144,
        "queue_depth": 16,
        "intra_op_parallelism": 2,
        "single_submit": True,
        "overlap_events": False,
    }
    cfg["nvswap"] = {
        "backend": "psync",
        "stripe_size": 65536,
        "checksum": True,
        "page_cache": True,
        "auto_evict": False,
        "nvme_paths": [swapdir, other],
        "wait_ms": 1500,
        "lookahead": 3,
        "persist": "persistent",
        "keep_generations": 3,
        "rank": 2,
        "node_queue_depth": 64,
        "split_queue_depth": True,
    }
    c = nvswap.Config.from_str(json.dumps(cfg), name="all.json")
    assert c.source == "all.json"
    assert c.offload("param") == {
        "present": True,
        "device": "nvme",
        "nvme_path": swapdir,
        "buffer_count": 3,
        "buffer_size": 1000,
        "max_in_cpu": 0,
        "pin_memory": False,
        "pipeline_read": True,
        "pipeline_write": True,
    }
    opt = c.offload("optimizer")
    assert (opt["present"], opt["device"]) == (True, "cpu")
    assert c.aio_options() == {
        "block_size": 262144,
        "queue_depth": 16,
        "single_submit": True,
        "overlap_events": False,
        "intra_op_parallelism": 2,
        "backend": "psync",
    }
    assert c.nvswap_options() == {
        "backend": "psync",
        "stripe_size": 65536,
        "checksum": True,
        "page_cache": True,
        "auto_evict": False,
        "nvme_paths": [swapdir, other],
        "wait_ms": 1500,
        "lookahead": 3,
        "persist": "persistent",
        "keep_generations": 3,
        "rank": 2,
        "node_queue_depth": 64,
        "split_queue_depth": True,
    }
    assert nvswap.Config.from_str(
        '{"nvswap": {"persist": "resume", "keep_generations": 5}}'
    ).nvswap_options()["persist"] == "resume"
    assert nvswap.Config.from_str(
        '{"nvswap": {"persist": "readonly"}}'
    ).nvswap_options()["persist"] == "readonly"


def test_load_reads_a_file_and_names_it(swapdir):
    path = os.path.join(swapdir, "ds_config.json")
    with open(path, "w") as f:
        json.dump(nvme_config(swapdir, buffer_count=7), f)
    c = nvswap.Config.load(path)
    assert c.source == path
    assert c.offload("param")["buffer_count"] == 7
    assert repr(c) == f"<nvswap.Config {path!r}>"
    # os.PathLike works too
    import pathlib

    assert nvswap.Config.load(pathlib.Path(path)).source == path


def test_an_unknown_key_is_a_config_error_with_its_position():
    text = (
        "{\n"
        '  "zero_optimization": {\n'
        '    "offload_param": {\n'
        '      "device": "nvme",\n'
        '      "nvme_pth": "/x"\n'
        "    }\n"
        "  }\n"
        "}\n"
    )
    with pytest.raises(nvswap.ConfigError) as ei:
        nvswap.Config.from_str(text, name="cfg.json")
    e = ei.value
    assert isinstance(e, nvswap.Error) and isinstance(e, ValueError)
    assert e.errno == errno.EINVAL
    assert (e.file, e.line, e.column) == ("cfg.json", 5, 7)
    assert e.key == "zero_optimization.offload_param.nvme_pth"
    assert "did you mean 'nvme_path'" in e.strerror


def test_a_wrong_type_names_the_key():
    text = '{"aio": {"queue_depth": "deep"}}'
    with pytest.raises(nvswap.ConfigError) as ei:
        nvswap.Config.from_str(text)
    e = ei.value
    assert e.errno == errno.EINVAL
    assert (e.file, e.line, e.key) == ("<string>", 1, "aio.queue_depth")
    # the column of the key
    assert e.column == text.index('"queue_depth"') + 1
    assert "must be a number" in e.strerror


def test_a_lookahead_out_of_range_names_the_key():
    assert nvswap.Config.from_str(
        '{"nvswap": {"lookahead": 0}}').nvswap_options()["lookahead"] == 0
    with pytest.raises(nvswap.ConfigError) as ei:
        nvswap.Config.from_str('{"nvswap": {"lookahead": 1025}}')
    e = ei.value
    assert e.errno == errno.EINVAL
    assert (e.line, e.column, e.key) == (1, 13, "nvswap.lookahead")
    assert "at most 1024" in e.strerror


def test_malformed_json_is_a_config_error_with_a_position():
    with pytest.raises(nvswap.ConfigError) as ei:
        nvswap.Config.from_str('{"aio": {', name="bad.json")
    assert ei.value.errno == errno.EINVAL
    assert ei.value.file == "bad.json"
    assert ei.value.line == 1


def test_an_nvme_section_without_a_path_is_refused():
    text = json.dumps({"zero_optimization": {"offload_param": {"device": "nvme"}}})
    with pytest.raises(nvswap.ConfigError) as ei:
        nvswap.Config.from_str(text)
    assert ei.value.errno == errno.EINVAL
    assert ei.value.key == "zero_optimization.offload_param"
    assert "needs an nvme_path" in ei.value.strerror


def test_a_missing_nvme_path_is_made_by_the_swapper_not_the_load(swapdir):
    missing = os.path.join(swapdir, "nope", "swap")
    nvswap.Config.from_str(json.dumps(nvme_config(missing)))  # loads
    assert os.listdir(swapdir) == []  # and makes nothing
    with open(os.path.join(swapdir, "f"), "wb"):
        pass
    blocked = os.path.join(swapdir, "f", "swap")
    with pytest.raises(nvswap.ConfigError) as ei:
        nvswap.Config.from_str(json.dumps(nvme_config(blocked)))
    assert ei.value.errno == errno.ENOTDIR
    assert ei.value.key == "zero_optimization.offload_param.nvme_path"
    assert f"'{os.path.join(swapdir, 'f')}' is not a directory" in \
        ei.value.strerror


def test_a_missing_file_is_a_config_error_without_position(swapdir):
    path = os.path.join(swapdir, "absent.json")
    with pytest.raises(nvswap.ConfigError) as ei:
        nvswap.Config.load(path)
    e = ei.value
    assert e.errno == errno.ENOENT
    assert (e.file, e.line, e.column, e.key) == (None, None, None, None)
    assert path in e.strerror


def test_warnings_list_deprecated_keys_and_use_gds():
    c = nvswap.Config.from_str('{"aio": {"thread_count": 2, "use_gds": true}}')
    assert c.use_gds is True
    assert c.aio_options()["intra_op_parallelism"] == 2
    assert len(c.warnings) == 2
    assert "aio.thread_count: deprecated spelling of aio.intra_op_parallelism" in c.warnings[0]
    assert "aio.use_gds" in c.warnings[1]


def test_aio_handle_has_the_configs_options(swapdir):
    c = nvswap.Config.from_str(
        '{"aio": {"block_size": 131072, "queue_depth": 4,'
        ' "intra_op_parallelism": 2, "single_submit": true,'
        ' "overlap_events": false}}'
    )
    with c.aio_handle() as h:
        assert isinstance(h, nvswap.aio_handle)
        assert h.get_block_size() == 131072
        assert h.get_queue_depth() == 4
        assert h.get_intra_op_parallelism() == 2
        assert h.get_single_submit() is True
        assert h.get_overlap_events() is False
        path = os.path.join(swapdir, "f")
        data = bytearray(os.urandom(300000))
        assert h.sync_pwrite(data, path) == 1
        back = bytearray(len(data))
        assert h.sync_pread(back, path) == 1
        assert back == data


def test_bad_arguments():
    c = nvswap.Config.from_str("{}")
    with pytest.raises(ValueError, match="'param' or 'optimizer'"):
        c.offload("gradient")
    with pytest.raises(TypeError):
        nvswap.Config.from_str(b"{}")
    with pytest.raises(ValueError, match="NUL"):
        nvswap.Config.from_str('{"a": 1}\0')
    with pytest.raises(TypeError, match="cannot create"):
        nvswap.Config()


def test_a_config_outlives_nothing_it_lends(swapdir):
    # The dicts hold copies: the path survives the Config.
    c = nvswap.Config.from_str(json.dumps(nvme_config(swapdir)))
    section = c.offload("param")
    del c
    assert section["nvme_path"] == swapdir


def test_a_config_makes_the_swapper_it_describes(swapdir):
    cfg = nvme_config(swapdir, buffer_count=3, buffer_size=3000)
    cfg["nvswap"] = {"backend": "psync"}
    c = nvswap.Config.from_str(json.dumps(cfg))
    with nvswap.Swapper(c, "param", rank=2) as s:
        assert s.dirs == [os.path.join(swapdir, "nvswap", "param", "rank2")]
        st = s.stats()
        # 3000 fp16 elements = 6000 bytes, rounded up to the alignment
        assert st["buffer_size"] == 8192
        assert st["buffer_count"] == 3
        assert st["backend"] == "psync"
    # elem_size overrides the default element size
    with nvswap.Swapper(c, elem_size=4, buffer_count=2) as s:
        st = s.stats()
        assert (st["buffer_size"], st["buffer_count"]) == (12288, 2)


def test_a_section_that_is_not_nvme_cannot_make_a_swapper(swapdir):
    c = nvswap.Config.from_str(json.dumps(nvme_config(swapdir)))
    with pytest.raises(nvswap.ConfigError) as ei:
        nvswap.Swapper(c, "optimizer")
    assert ei.value.errno == errno.EINVAL
    assert 'offload_optimizer.device is "none"' in ei.value.strerror
    with pytest.raises(ValueError, match="'param' or 'optimizer'"):
        nvswap.Swapper(c, "gradient")
    with pytest.raises(TypeError, match="nvswap.Config"):
        nvswap.Swapper({"zero_optimization": {}})


def test_launch_reads_the_launchers_environment():
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("OMPI_", "PMI_", "SLURM_", "MPI_LOCAL")) or k in (
                "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            del env[k]
    code = ("import json, nvswap; print(json.dumps(nvswap.launch()))")
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == {"rank": 0, "world_size": 1, "local_rank": 0,
                               "local_size": 1, "source": "none"}
    env.update(RANK="2", WORLD_SIZE="4", LOCAL_RANK="0",
               LOCAL_WORLD_SIZE="2")
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == {"rank": 2, "world_size": 4, "local_rank": 0,
                               "local_size": 2,
                               "source": "torch.distributed"}
    env["RANK"] = "two"
    r = subprocess.run([sys.executable, "-c", code], env=env,
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert 'nvswap.Error: [Errno 22] nvs_launch_detect: RANK="two"' in r.stderr


def test_a_swapper_without_a_rank_takes_the_launchers(swapdir):
    env = dict(os.environ, RANK="3", WORLD_SIZE="4")
    code = textwrap.dedent(f"""
        import nvswap
        s = nvswap.Swapper(nvme_path={swapdir!r}, buffer_size="64K",
                           buffer_count=2)
        print(s.dirs[0])
        c = nvswap.Config.from_str('{{"nvswap": {{"rank": 1}}}}')
        print(c.nvswap_options()["rank"], c.nvswap_options()["node_queue_depth"])
    """)
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, check=True).stdout
    lines = out.split("\n")
    assert lines[0].endswith("/nvswap/rank3"), lines[0]
    assert lines[1] == "1 0"


# Issue 49, item 4: a node's ranks share the disk's queue by default.
QD = textwrap.dedent("""
    import sys, nvswap
    d = sys.argv[1]
    s = nvswap.Swapper(nvme_path=d, buffer_size="64K", buffer_count=2)
    print(s.stats()["queue_depth"])
    s.close()
    for nv in ("", '"split_queue_depth": false', '"node_queue_depth": 96'):
        c = nvswap.Config.from_str(
            '{"zero_optimization": {"offload_param": {"device": "nvme", '
            '"nvme_path": "%s"}}, "aio": {"queue_depth": 64}, '
            '"nvswap": {%s}}' % (d, nv))
        with nvswap.Swapper(c, kind="param", buffer_size="64K") as s:
            print(s.stats()["queue_depth"])
""")


@pytest.mark.parametrize("env, want", [
    ({}, ["128", "64", "64", "96"]),
    ({"RANK": "3", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
      "WORLD_SIZE": "8"}, ["32", "16", "64", "24"]),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, ["64", "32", "64", "48"]),
])
def test_a_nodes_ranks_share_the_queue_depth_by_default(swapdir, env,
                                                         want):
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("OMPI_", "PMI_", "SLURM_", "MPI_"))
             and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                           "LOCAL_WORLD_SIZE")}
    r = subprocess.run([sys.executable, "-c", QD, swapdir],
                       env={**clean, **env}, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # no config: the default 128, shared; a config: aio.queue_depth 64
    # shared, or whole (split_queue_depth false), or the node's 96 split
    assert r.stdout.split() == want
