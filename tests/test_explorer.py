"""The Explorer, driven from Python as a user would drive it in a notebook."""

import datetime
import html
import json

import pytest
from deadlines import deadline

import shardviz
from shardviz import Plan, ShardvizError, examples
from shardviz.widgets.explorer import TABS

EXPORT = TABS.index("Export")


@pytest.fixture
def app():
    return shardviz.Explorer(examples.mlp, inputs=(8, 16), plan=examples.megatron_plan(),
                             auto_run=False)


def rule_row(app, i):
    return app.rule_editor.rows.children[i]


def key_box(app, i):
    return rule_row(app, i).children[1]


def dims(app, i):
    return rule_row(app, i).children[2].children


def feedback(app, i):
    return html.unescape(rule_row(app, i).children[8].value)


def text(widget):
    return html.unescape(widget.value)


def mesh_row(app, i):
    return app.mesh_editor.rows.children[i]


def click(row, k):
    row.children[k].click()


def test_it_starts_from_the_plan_and_shows_its_report(app):
    assert app.plan == examples.megatron_plan()
    assert [key_box(app, i).value for i in range(3)] == list(app.plan.rule_keys)
    assert [d.value for d in dims(app, 0)] == ["—", "model"]
    assert "3 sharded" in text(app.header)
    assert app.picture.value[:4] == b"\x89PNG"
    assert "✓ 1 path, rank 2" in feedback(app, 0)
    assert app.picker.options[0] == ("up/kernel", "up/kernel")


def test_a_key_edit_reanalyses_at_once_and_marks_the_forward_pass_stale(app):
    app.run()
    assert app.forward_is_fresh and "done in" in text(app.run_status)
    before = app.picture.value
    key_box(app, 0).value = "d1/kernel"  # matches nothing
    assert app.plan.rules[0].key == "d1/kernel"
    assert "matches nothing" in feedback(app, 0)
    assert app.report.variables.set_index("path").loc["up/kernel", "status"] == "replicated"
    assert app.picture.value != before  # the picked tensor, up/kernel, is now replicated
    assert not app.forward_is_fresh and "stale" in text(app.header)
    app.run_button.click()
    assert app.forward_is_fresh
    assert app.report.trace is not None


def test_dim_dropdowns_edit_the_axes(app):
    dims(app, 0)[0].value = "batch"
    assert app.plan.rules[0].axes == ("batch", "model")
    rule_row(app, 0).children[4].click()  # minus: drop the last dim
    assert app.plan.rules[0].axes == ("batch",)
    assert "rule has 1 entries" in feedback(app, 0)
    rule_row(app, 0).children[3].click()  # plus
    assert app.plan.rules[0].axes == ("batch", None)


def test_rules_can_be_added_moved_and_deleted(app):
    app.rule_editor.new_key.value = ".*down/bias"
    app.rule_editor.box.children[2].children[1].click()
    assert app.plan.rule_keys[-1] == ".*down/bias" and app.plan.rules[-1].axes == (None,)
    assert len(app.rule_editor.rows.children) == 4
    rule_row(app, 3).children[5].click()  # up
    assert app.plan.rule_keys[2] == ".*down/bias"
    rule_row(app, 2).children[6].click()  # down
    assert app.plan.rule_keys[3] == ".*down/bias"
    rule_row(app, 3).children[7].click()  # delete
    assert app.plan.rule_keys == examples.megatron_plan().rule_keys
    app.rule_editor.new_key.value = ""
    app.rule_editor.box.children[2].children[1].click()
    assert "Type a key first" in text(app.rule_editor.message)


def test_rule_feedback_names_each_mistake(app):
    key_box(app, 0).value = "up/(kernel"
    assert "invalid regex" in feedback(app, 0)
    key_box(app, 0).value = ".*kernel"
    assert "conflicts with rule 2" in feedback(app, 0)
    key_box(app, 0).value = ".*up/kernel"
    app.set_plan(app.plan.with_rule_at(0, axes=(None, "modle")))
    assert "unknown axis 'modle'" in feedback(app, 0)
    assert [o for o in dims(app, 0)[1].options if o[1] == "modle"]  # kept, not lost


def test_suggestions_come_from_the_model(app):
    options = key_box(app, 0).options
    assert "up/kernel" in options and "down/output" in options


def test_mesh_edits_and_bad_input(app):
    mesh_row(app, 1).children[1].value = 0
    assert "size 0" in text(app.mesh_editor.message)
    assert app.plan.mesh_dict == {"batch": 2, "model": 4}  # the last good plan stays
    assert mesh_row(app, 1).children[1].value == 0  # what the user typed stays
    mesh_row(app, 1).children[1].value = 2
    assert app.plan.mesh_dict == {"batch": 2, "model": 2} and text(app.mesh_editor.message) == ""
    assert "4 of the 8 devices" in text(app.mesh_editor.check)
    mesh_row(app, 1).children[0].value = "tensor"
    assert app.plan.axis_names == ("batch", "tensor")
    assert app.plan.rules[0].axes == (None, "tensor")  # rules follow a renamed axis
    mesh_row(app, 1).children[0].value = "batch"
    assert "appears twice" in text(app.mesh_editor.message)
    assert app.plan.axis_names == ("batch", "tensor")
    app.mesh_editor.box.children[2].children[0].click()  # add axis
    assert app.plan.axis_names == ("batch", "tensor", "axis1")
    click(mesh_row(app, 2), 2)  # remove it
    assert app.plan.axis_names == ("batch", "tensor")
    app.mesh_editor.batch.value = "tensor"
    assert app.plan.batch_axis == "tensor"
    app.mesh_editor.preset.value = "2d"
    assert app.plan.mesh_dict == {"batch": 2, "model": 4} and app.plan.batch_axis == "batch"
    assert app.mesh_editor.preset.value == ""
    app.mesh_editor.preset.value = "dp"
    assert app.plan.mesh_dict == {"batch": 8}
    assert "unknown axis 'tensor'" in feedback(app, 0)  # the rules still say 'tensor'
    assert app.plan.rules[0].axes == (None, "tensor")


def test_a_mesh_larger_than_the_machine_is_explained(app):
    mesh_row(app, 1).children[1].value = 8
    assert "16 devices needed, 8 available" in text(app.mesh_editor.check)
    app.run()
    assert "needs 16 devices" in text(app.run_status)
    assert len(app.report.variables) == 4


def test_a_failing_forward_pass_shows_its_error_inside_the_app():
    app = shardviz.Explorer(examples.mlp, inputs=(6, 16), plan=Plan({"batch": 4, "model": 2}),
                            auto_run=False)
    app.run()
    assert "Forward pass failed" in text(app.run_status) and "batch size 6" in text(app.run_status)
    assert app.report.trace is None and len(app.report.variables) == 4


def test_auto_run_reruns_cheap_forward_passes():
    app = shardviz.Explorer(examples.mlp, inputs=(8, 16), plan=examples.megatron_plan())
    assert app.forward_is_fresh and app.auto_run.value
    key_box(app, 0).value = "up/kernel"
    assert app.forward_is_fresh
    assert app.report.trace is not None


def test_tabs_render_their_views(app):
    app.run()
    for index in range(5):  # Tensor, Variables, Problems, Memory, Communication
        app.tabs.selected_index = index
    assert "up/kernel" in app.variables_table.value
    assert "all-reduce" in app.comm_table.value and app.flow_picture.value[:4] == b"\x89PNG"
    assert app.memory_picture.value[:4] == b"\x89PNG"
    # What fills a device at the compiled program's peak, below it.
    assert app.peak_picture.value[:4] == b"\x89PNG" and app.peak_picture.layout.display == ""
    assert "buffer assignment" in app.peak_note.value
    assert "No problems" in app.problems_table.value


def test_picker_filters_and_shows_activations(app):
    app.run()
    app.filter.value = "output"
    assert [v for _, v in app.picker.options] == ["up/output#0#0", "down/output#0#0"]
    app.picker.value = "down/output#0#0"
    assert "down/output" in app.explanation.value
    assert "visualize_sharding" in app.jax_text.value
    app.filter.value = ""
    app.picker.value = "up/kernel"
    app.rows_dim.value, app.cols_dim.value = 1, 0
    assert app.picture.value[:4] == b"\x89PNG"


def test_export_python_and_json(app):
    app.tabs.selected_index = shardviz.widgets.explorer.TABS.index("Export")
    app.tabs.children[EXPORT].children[0].children[0].click()
    namespace = {}
    exec(app.python_code.value, namespace)
    assert Plan.from_keras(namespace["distribution"]) == app.plan
    assert json.loads(app.json_text.value)["format"] == "shardviz.plan"
    assert "download=\"plan.json\"" in app.download.value
    other = Plan({"batch": 8})
    app.json_text.value = other.to_json()
    app.tabs.children[EXPORT].children[4].children[0].click()
    assert app.plan == other and "plan loaded" in text(app.export_message)
    app.json_text.value = "{not json"
    app.tabs.children[EXPORT].children[4].children[0].click()
    assert app.plan == other and "not valid JSON" in text(app.export_message)
    upload = examples.megatron_plan().to_json().encode()
    app.upload.value = ({"name": "plan.json", "type": "application/json", "size": len(upload),
                         "content": memoryview(upload),
                         "last_modified": datetime.datetime(2026, 1, 1)},)
    assert app.plan == examples.megatron_plan()


def test_set_plan_undo_redo(app):
    first = app.plan
    app.set_plan(Plan.data_parallel(8))
    assert app.plan == Plan.data_parallel(8)
    assert len(app.rule_editor.rows.children) == 0
    assert app.report.plan == Plan.data_parallel(8)
    app.undo()
    assert app.plan == first
    app.redo()
    assert app.plan == Plan.data_parallel(8)
    with pytest.raises(ShardvizError):
        app.set_plan({"format": "nope"})
    assert app.plan == Plan.data_parallel(8)


def test_nothing_prints_while_the_app_runs(capsys):
    app = shardviz.Explorer(examples.transformer_block, inputs=(8, 16, 64),
                            plan=examples.transformer_plan())
    key_box(app, 0).value = ".*attn/(query|key)/kernel"
    app.picker.value = "attn/query/kernel"
    app.picker.value = "up/kernel"
    for index in range(6):
        app.tabs.selected_index = index
    app.run()
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_explorer_without_inputs_shows_variables_only():
    app = shardviz.Explorer(examples.sequential_mlp, plan=Plan({"batch": 2, "model": 4},
                                                               {"d1/kernel": (None, "model")}))
    assert "variables only" in text(app.header)
    assert "matches nothing" in feedback(app, 0)
    app.run()
    assert "inputs=" in text(app.run_status)
    bundle = app._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_the_target_box_plans_for_other_hardware_and_refuses_what_does_not_fit(app):
    pytest.importorskip("libtpu")
    app.target_box.value = "v5e:2x4"
    assert app.target == "v5e:2x4" and app.report.target.hardware.family == "tpu"
    assert app.report.memory["capacity_bytes"].iloc[0] > 10**10
    app.run()
    assert app.report.collectives["network"].tolist() == ["ici"]
    assert "v5e:2x4" in text(app.header)
    app.tabs.selected_index = 4  # Communication: on a TPU, where the step's time goes
    assert app.time_picture.value[:4] == b"\x89PNG" and app.time_picture.layout.display == ""
    app.target_box.value = "v5e:4x4"  # 16 chips for an 8-device mesh: refused, kept
    assert app.target == "v5e:2x4" and "has 8 devices, but the target v5e:4x4 has 16" in text(
        app.target_note)
    app.target_box.value = "tpu9"
    assert "Unknown target 'tpu9'" in text(app.target_note) and app.target == "v5e:2x4"
    app.target_box.value = "h100:8"
    assert app.target == "h100:8" and text(app.target_note) == ""
    app.set_target("cpu")
    assert app.report.target.hardware.family == "cpu" and app.target_box.value == "cpu"


# ------------------------------------------------------------ a real widget
def test_the_explorer_is_a_widget_with_a_plan_trait():
    import ipywidgets as widgets

    app = shardviz.Explorer(examples.mlp, inputs=(8, 16), plan=examples.megatron_plan(),
                            auto_run=False)
    assert isinstance(app, widgets.VBox) and app.app is app
    box = widgets.HBox([app, widgets.HTML("my own table")])  # it can be placed
    assert box.children[0] is app
    seen = []
    app.observe(lambda change: seen.append(change["new"]), names="plan")
    key_box(app, 0).value = "up/kernel"                      # an edit in the rule editor
    app.undo()
    app.redo()
    app.set_plan(Plan.data_parallel(8))
    app.json_text.value = examples.megatron_plan().to_json()
    app.tabs.children[EXPORT].children[4].children[0].click()     # Load JSON
    assert len(seen) == 5 and seen[-1] == examples.megatron_plan() == app.plan
    assert seen[0].rules[0].key == "up/kernel" and seen[3] == Plan.data_parallel(8)
    app.plan = Plan({"batch": 8})                            # assigning the trait applies it
    assert app.report.plan == Plan({"batch": 8}) and app.mesh_editor.rows.children[0].children[
        1].value == 8
    app.plan = Plan({"batch": 4, "model": 4})                 # 16 devices: analysed, shown
    assert app.report.plan == app.plan
    assert "text/plain" in app._repr_mimebundle_() and "shardviz Explorer" in \
        app._repr_mimebundle_()["text/plain"]


def test_the_state_is_plain_python():
    from shardviz.widgets.state import ExplorerState

    state = ExplorerState(examples.mlp, examples.megatron_plan(), inputs=(8, 16))
    assert state.wants_run and state.status == "forward pass not run yet"
    state.run()
    assert state.fresh and not state.wants_run
    state.apply(Plan({"batch": 2, "model": 8}))              # 16 devices on 8: fails
    assert state.wants_run
    state.run()
    assert state.failure is not None and not state.wants_run
    assert state.status.startswith("forward pass failed under this plan")
    state.undo()                                              # back to the plan that ran
    assert state.failure is None and state.fresh and not state.wants_run
    state.apply(state.plan.with_rule(".*down/bias", ("model",)))
    assert state.failure is None and state.wants_run


def test_a_failed_pass_clears_and_auto_run_resumes_when_the_plan_is_valid_again():
    app = shardviz.Explorer(examples.mlp, inputs=(8, 16), plan=examples.megatron_plan())
    assert app.forward_is_fresh
    mesh_row(app, 1).children[1].value = 8                    # 16 devices needed: fails
    assert "needs 16 devices" in text(app.run_status)
    assert "failed under this plan" in text(app.header)
    mesh_row(app, 1).children[1].value = 4                    # valid again
    assert app.forward_is_fresh and "fresh" in text(app.run_status)
    assert "needs 16 devices" not in text(app.run_status) and "fresh" in text(app.header)
    key_box(app, 0).value = "up/(kernel"                      # an invalid regex: refused
    key_box(app, 0).value = ".*up/kernel"                     # fixed: runs again by itself
    assert app.forward_is_fresh


def test_pasted_json_survives_any_re_render(app):
    app.tabs.selected_index = shardviz.widgets.explorer.TABS.index("Export")
    pasted = Plan({"batch": 8}).to_json()
    app.json_text.value = pasted
    app.run()                                                  # re-renders the visible tab
    key_box(app, 0).value = "up/kernel"                        # an unrelated edit
    app.undo()
    assert app.json_text.value == pasted and "kept" in text(app.json_note)
    app.tabs.children[EXPORT].children[4].children[0].click()       # Load JSON
    assert app.plan == Plan({"batch": 8}) and "Load JSON: plan loaded" in text(app.export_message)


def test_load_errors_name_their_subject_and_clear_after_a_success(app):
    app.upload.value = ({"name": "model.bin", "type": "", "size": 2,
                         "content": memoryview(b"\xff\xfe"),
                         "last_modified": datetime.datetime(2026, 1, 1)},)
    assert "Open file 'model.bin' failed: it is not UTF-8" in text(app.export_message)
    app.json_text.value = "{not json"
    app.tabs.children[EXPORT].children[4].children[0].click()
    assert ">Load JSON failed: The plan is not valid JSON" in text(app.export_message)
    app.json_text.value = Plan({"batch": 8}).to_json()
    app.tabs.children[EXPORT].children[4].children[0].click()
    assert "failed" not in text(app.export_message) and text(app.error) == ""


def test_refused_text_stays_until_the_user_changes_that_field(app):
    mesh_row(app, 0).children[0].value = "model"              # rename batch -> model: refused
    refused = text(app.mesh_editor.message)
    assert "model" in refused and app.plan.axis_names == ("batch", "model")
    key_box(app, 1).value = "up/bias"                          # an unrelated edit
    assert mesh_row(app, 0).children[0].value == "model"       # the typed text is kept
    assert text(app.mesh_editor.message) == refused            # and so is the message
    mesh_row(app, 0).children[0].value = "data"                # the user fixes that field
    assert app.plan.axis_names == ("data", "model") and text(app.mesh_editor.message) == ""


def test_typing_a_rule_key_makes_one_undo_step(app):
    for typed in ("u", "up", "up/", "up/kernel"):              # keystrokes, debounced in a kernel
        key_box(app, 0).value = typed
    assert app.plan.rule_keys[0] == "up/kernel"
    app.undo()
    assert app.plan == examples.megatron_plan()


def test_enter_in_the_new_rule_box_adds_the_rule(app):
    app.rule_editor.new_key.value = ".*down/bias"             # what Enter sends
    assert app.plan.rule_keys[-1] == ".*down/bias" and app.rule_editor.new_key.value == ""
    app.rule_editor.box.children[2].children[1].click()        # the click as the box loses focus
    assert app.plan.rule_keys.count(".*down/bias") == 1 and text(app.rule_editor.message) == ""


def test_choosing_a_collective_explains_it_and_its_fix_can_be_applied_and_undone():
    wrong = Plan({"batch": 2, "model": 4}, {".*up/kernel": (None, "model"),
                                           ".*down/kernel": (None, "model")})
    app = shardviz.Explorer(examples.mlp, inputs=(8, 16), plan=wrong, auto_run=False)
    app.run()
    app.tabs.selected_index = shardviz.widgets.explorer.TABS.index("Communication")
    labels = [label for label, _ in app.why_select.options]
    assert labels[1].startswith("#0 all-gather at down")
    assert app.fix_button.disabled
    app.why_select.value = 0
    shown = text(app.why_html)
    assert "all-gathers the input" in shown and ".*down/kernel" in shown
    assert not app.fix_button.disabled
    seen = []
    app.observe(lambda change: seen.append(change["new"]), names="plan")
    app.fix_button.click()
    assert dict((r.key, r.axes) for r in app.plan.rules)[".*down/kernel"] == ("model", None)
    assert seen and seen[-1] == app.plan
    app.run()
    assert app.traced.collectives["kind"].tolist() == ["all-reduce"]
    app.undo()
    assert app.plan == wrong


def test_a_megatron_all_reduce_offers_no_fix(app):
    app.run()
    app.tabs.selected_index = shardviz.widgets.explorer.TABS.index("Communication")
    app.why_select.value = 0
    assert "price of splitting" in text(app.why_html)
    assert app.fix_button.disabled


def test_the_suggest_tab_lists_plans_shows_the_diff_and_applies_one(app):
    app.tabs.selected_index = shardviz.widgets.explorer.TABS.index("Suggest")
    app.suggest_button.click()
    assert "plans for 8 devices, best first" in text(app.suggest_note)
    assert "data parallel" in app.suggest_table.value
    labels = [label for label, _ in app.suggest_select.options]
    choice = next(i for i, label in enumerate(labels) if "data parallel" in label) - 1
    app.suggest_select.value = choice
    diff = text(app.suggest_diff)
    assert "mesh: batch=2 × model=4 → batch=8 × model=1" in diff
    assert "- rule '.*up/kernel'" in diff
    before = app.plan
    app.suggest_apply.click()
    assert app.plan.mesh_dict == {"batch": 8, "model": 1} and not app.plan.rules
    app.undo()
    assert app.plan == before


# ------------------------------------------------------------ inputs that used to break it
def upload(app, name, text):
    app.upload.value = ({"name": name, "type": "application/json", "size": len(text),
                         "content": memoryview(text.encode()),
                         "last_modified": datetime.datetime(2026, 1, 1)},)


def test_a_refused_key_keeps_its_text_and_mark_when_rules_are_added_moved_or_deleted(app):
    key_box(app, 0).value = "   "                              # an empty key: refused
    assert app.plan == examples.megatron_plan()
    assert "non-empty string" in text(app.rule_editor.message)
    assert "shardviz-refused" in key_box(app, 0)._dom_classes
    assert "not applied: the rule keeps '.*up/kernel'" in feedback(app, 0)
    app.rule_editor.new_key.value = ".*down/bias"              # another rule is added
    assert app.plan.rule_keys[-1] == ".*down/bias"
    assert key_box(app, 0).value == "   " and "shardviz-refused" in key_box(app, 0)._dom_classes
    assert "non-empty string" in text(app.rule_editor.message)
    assert key_box(app, 3).value == ".*down/bias"
    rule_row(app, 0).children[6].click()                      # move the rule down: text follows
    assert app.plan.rule_keys[1] == ".*up/kernel"
    assert key_box(app, 1).value == "   " and key_box(app, 0).value == ".*up/bias"
    assert "shardviz-refused" not in key_box(app, 0)._dom_classes
    rule_row(app, 0).children[7].click()                      # delete the rule above it
    assert key_box(app, 0).value == "   " and "not applied" in feedback(app, 0)
    key_box(app, 0).value = "up/kernel"                        # the user fixes the field
    assert app.plan.rule_keys[0] == "up/kernel" and text(app.rule_editor.message) == ""
    assert "shardviz-refused" not in key_box(app, 0)._dom_classes
    assert "✓ 1 path" in feedback(app, 0)


def test_forty_clicks_on_add_axis_say_what_to_change_and_the_editor_stays_usable(app):
    add_axis = app.mesh_editor.box.children[2].children[0]
    for _ in range(40):
        add_axis.click()
    axes = len(app.plan.axis_names)
    message = text(app.mesh_editor.message)
    assert "axes" in message and "at most" in message and "Merge axes" in message
    assert text(app.error) == "" and "Traceback" not in message
    click(mesh_row(app, axes - 1), 2)                          # remove the last axis
    assert len(app.plan.axis_names) == axes - 1 and text(app.mesh_editor.message) == ""
    key_box(app, 0).value = "up/kernel"
    assert app.plan.rule_keys[0] == "up/kernel"


def test_an_overflowing_repeat_count_is_an_invalid_rule_not_an_exception(app):
    key_box(app, 1).value = "a{99999999999}"
    assert app.plan.rule_keys[1] == "a{99999999999}"
    assert "invalid regex: the repetition number is too large: use a smaller count" in \
        feedback(app, 1)
    assert text(app.error) == "" and "OverflowError" not in text(app.rule_editor.message)
    assert app.report.problems_of("invalid-regex")[0].rule == "a{99999999999}"
    app.rule_editor.new_key.value = "b{99999999999}"           # typed into the new-rule box
    assert app.plan.rule_keys[-1] == "b{99999999999}" and text(app.error) == ""
    assert "invalid regex" in feedback(app, 3)
    key_box(app, 1).value = ".*up/bias"
    assert "an invalid rule makes Keras fail" in feedback(app, 1)  # rule 3 is still invalid
    rule_row(app, 3).children[7].click()                      # delete it
    assert "✓ 1 path" in feedback(app, 1) and app.report.problems_of("invalid-regex") == []


def test_a_plan_file_with_30000_mesh_axes_is_refused_with_a_message(app):
    before = app.plan
    plan = {"format": "shardviz.plan", "version": 1,
            "mesh": {f"a{i}": 1 for i in range(30000)}, "batch_axis": "a0", "rules": []}
    upload(app, "big.json", json.dumps(plan))
    message = text(app.export_message)
    assert message.startswith("<span") and "Open file 'big.json' failed" in message
    assert "30,000 axes" in message and "at most" in message
    assert app.plan == before and text(app.error) == ""
    upload(app, "good.json", Plan({"batch": 8}).to_json())    # the next file loads
    assert app.plan == Plan({"batch": 8}) and "plan loaded" in text(app.export_message)


def test_typing_a_backtracking_key_shows_the_problem_and_the_app_stays_usable():
    import keras

    def build():
        x = keras.Input((4,))
        return keras.Model(x, keras.layers.Dense(8, name="a" * 40)(x), name="m")

    app = shardviz.Explorer(build, inputs=(8, 4), plan=Plan({"batch": 8}, {".*kernel": (None,)}))
    with deadline(120):
        for typed in ("(", "(a", "(a|aa", "(a|aa)", "(a|aa)+", "(a|aa)+$"):  # keystrokes
            key_box(app, 0).value = typed
    assert app.plan.rule_keys[0] == "(a|aa)+$"
    assert "backtracks catastrophically" in feedback(app, 0) and "'" + "a" * 40 in feedback(app, 0)
    assert "was not run" in text(app.run_status) and text(app.error) == ""
    key_box(app, 0).value = ".*kernel"
    assert "✓ 1 path" in feedback(app, 0) and app.forward_is_fresh
