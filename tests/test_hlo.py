"""Reading collectives out of compiled HLO text."""

import pytest

from shardviz.trace import hlo

MESH = (("batch", "model"), (2, 4))


@pytest.mark.parametrize("text, groups", [
    ("{{0,1,2,3},{4,5,6,7}}", [[0, 1, 2, 3], [4, 5, 6, 7]]),
    ("{{0,4},{1,5},{2,6},{3,7}}", [[0, 4], [1, 5], [2, 6], [3, 7]]),
    ("[2,4]<=[8]", [[0, 1, 2, 3], [4, 5, 6, 7]]),
    ("[4,2]<=[2,4]T(1,0)", [[0, 4], [1, 5], [2, 6], [3, 7]]),
    ("[1,8]<=[8]", [[0, 1, 2, 3, 4, 5, 6, 7]]),
    ("mesh['axis_0'=2,'axis_1'=4] {'axis_0'}", [[0, 4], [1, 5], [2, 6], [3, 7]]),
    ("mesh['axis_0'=2,'axis_1'=4] {'axis_1'}", [[0, 1, 2, 3], [4, 5, 6, 7]]),
    ("mesh['axis_0'=2,'axis_1'=4] {'axis_0','axis_1'}", [list(range(8))]),
    ("mesh['axis_0'=4,'axis_1'=2], device_ids=([2,2,2]T(0,2,1)) {'axis_0':(2)2}",
     [[0, 1], [2, 3], [4, 5], [6, 7]]),
    ("mesh['axis_0'=4,'axis_1'=1,'axis_2'=2], device_ids=([2,4]T(1,0)) {'axis_0'}",
     [[0, 1, 2, 3], [4, 5, 6, 7]]),
])
def test_three_spellings_of_replica_groups(text, groups):
    got = hlo.parse_replica_groups(text)
    assert sorted(sorted(g) for g in got) == sorted(sorted(g) for g in groups)


def test_groups_map_to_mesh_axes():
    names, shape = MESH
    assert hlo.group_axes([[0, 1, 2, 3], [4, 5, 6, 7]], names, shape) == (("model",), True)
    assert hlo.group_axes([[0, 4], [1, 5], [2, 6], [3, 7]], names, shape) == (("batch",), True)
    assert hlo.group_axes([list(range(8))], names, shape) == (("batch", "model"), True)
    assert hlo.group_axes([[0, 1], [2, 3], [4, 5], [6, 7]], names, shape) == (("model",), False)


def test_op_name_gives_layer_and_pass():
    assert hlo.scopes_of('jit(fwd)/down/dot_general') == (("down",), "forward")
    assert hlo.scopes_of("jit(step)/transpose(jvp(up))/dot_general") == (("up",), "backward")
    scopes, _ = hlo.scopes_of("jit(step)/(jvp()/reduce_sum:transpose(jvp(up))/dot_general:"
                              "transpose(jvp(down))/reduce_sum)")
    assert scopes == ("up", "down")
    assert hlo.layer_for_scope("block_0/down", ["my_model/block_0/down"]) == "my_model/block_0/down"
    assert hlo.layer_for_scope("attn/query/abc,cde->abde", ["attn", "attn/query"]) == "attn/query"
    assert hlo.layer_for_scope("nowhere", ["attn"]) is None


SAMPLE = """
HloModule jit_fwd, entry_computation_layout={(f32[4,16]{1,0})->f32[4,16]{1,0}}

ENTRY %main (param: f32[4,16]) -> f32[8,4] {
  %param = f32[4,16]{1,0} parameter(0)
  %fusion = f32[4,16]{1,0} fusion(%param), kind=kLoop, calls=%fused
  %all-reduce = f32[4,16]{1,0} all-reduce(%fusion), channel_id=1, replica_groups=[2,4]<=[8], use_global_device_ids=true, to_apply=%add, metadata={op_name="jit(fwd)/down/dot_general" stack_frame_id=15}
  %slice = f32[4,4]{1,0} fusion(%all-reduce), kind=kLoop, calls=%fused.2
  %all-gather-start = (f32[4,4]{1,0}, f32[8,4]{1,0}) all-gather-start(%slice), channel_id=2, replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_0'}, dimensions={0}, use_global_device_ids=true, metadata={op_name="jit(fwd)/down/add"}
  %all-gather-done = f32[8,4]{1,0} all-gather-done(%all-gather-start)
  %cp = f32[4,4]{1,0} collective-permute(f32[4,4]{1,0} %slice), channel_id=3, source_target_pairs={{0,4},{4,0},{1,5},{5,1}}
  ROOT %a2a = f32[8,4]{1,0} all-to-all(%all-gather-done), channel_id=4, replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}
}
"""


def test_collectives_from_hlo_text():
    names, shape = MESH
    found = hlo.collectives(SAMPLE, names, shape)
    assert [c.kind for c in found] == ["all-reduce", "all-gather", "collective-permute", "all-to-all"]
    ar, ag, cp, a2a = found
    assert (ar.axes, ar.bytes_per_device, ar.layer, ar.pass_) == (("model",), 256, "down", "forward")
    assert ag.async_ and ag.axes == ("batch",)
    assert (ag.operand_bytes, ag.result_bytes, ag.bytes_per_device) == (64, 128, 128)
    assert cp.axes == ("batch",) and cp.bytes_per_device == 64
    assert a2a.axes == ("model",) and a2a.bytes_per_device == 128


def test_shape_bytes():
    assert hlo.shape_bytes("bf16[1024,4096]{1,0}") == 1024 * 4096 * 2
    assert hlo.shape_bytes("(f32[2], s8[3])") == 11


def _transfer(op: str, name: str, shape: str, kind: str, rendezvous: str) -> str:
    return (f'  %{name} = ({shape}, u32[], token[]) {op}(%p, %after-all), channel_id=1, '
            'is_host_transfer=true, frontend_attributes={_xla_host_transfer_handler_name='
            f'"xla_megascale_runtime",_xla_host_transfer_rendezvous="{rendezvous}",'
            f'_xla_megascale_transfer_type="{kind}"}}')


def test_a_cross_slice_all_gather_counts_the_gathered_buffer_it_receives():
    """The send holds this slice's part; the recv with the same rendezvous
    holds the gathered buffer, which is the documented size."""
    text = "\n".join([
        _transfer("send", "send", "f32[16,1024]", "ALL_GATHER", "all-gather.8_0"),
        _transfer("recv", "recv", "f32[32,1024]", "ALL_GATHER", "all-gather.8_0"),
    ])
    (c,) = hlo.collectives(text, ("data",), (2,))
    assert (c.kind, c.network) == ("all-gather", "dcn")
    assert (c.operand_bytes, c.result_bytes, c.bytes_per_device) == (65536, 131072, 131072)


def test_a_cross_slice_permute_is_a_documented_kind():
    text = _transfer("send", "send.3", "bf16[8,128]", "ONE_TO_ONE", "cp.1_0")
    (c,) = hlo.collectives(text, ("data",), (2,))
    assert c.kind == "collective-permute" and c.kind in hlo.COLLECTIVE_KINDS
    assert set(hlo.MEGASCALE_KINDS.values()) <= set(hlo.COLLECTIVE_KINDS)
