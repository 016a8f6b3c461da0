"""Sample CSV parsing: what is accepted, and that every refusal says where and what to fix."""

import numpy as np
import pytest

from tpm import (
    LoadingSamples,
    SampleError,
    TpmError,
    TrainingSamples,
    detect_kind,
    read_loading_samples,
    read_samples,
    read_training_samples,
)

TRAIN_HEADER = "batch_size,flops,model_params,gpus,step_time_s"
LOAD_HEADER = "pipeline,batch_size,workers,load_rate"


def train_file(*rows: str, header: str = TRAIN_HEADER) -> str:
    return "\n".join([header, *rows]) + "\n"


def load_file(*rows: str, header: str = LOAD_HEADER) -> str:
    return "\n".join([header, *rows]) + "\n"


def refusal_of_training(text: str) -> SampleError:
    with pytest.raises(SampleError) as caught:
        read_training_samples(text, "train.csv")
    return caught.value


def refusal_of_loading(text: str) -> SampleError:
    with pytest.raises(SampleError) as caught:
        read_loading_samples(text, "load.csv")
    return caught.value


def test_training_rows_are_read_in_order_with_extra_columns_ignored() -> None:
    text = train_file(
        "64,4.1e9,25.6e6,4,0.21,resnet50",
        "32,1.8e9,11.7e6,1,0.05,resnet18",
        header=TRAIN_HEADER + ",model",
    )
    samples = read_training_samples(text, "train.csv")
    assert len(samples) == 2
    assert samples.batch_size.tolist() == [64.0, 32.0]
    assert samples.flops.tolist() == [4.1e9, 1.8e9]
    assert samples.model_params.tolist() == [25.6e6, 11.7e6]
    assert samples.gpus.tolist() == [4.0, 1.0]
    assert samples.step_time_s is not None
    assert samples.step_time_s.tolist() == [0.21, 0.05]


def test_columns_may_come_in_any_order_with_spaces_crlf_and_a_byte_order_mark() -> None:
    text = "\ufeff step_time_s , gpus,model_params,flops,batch_size\r\n0.2, 2 ,1e6,1e9,16\r\n"
    samples = read_training_samples(text, "train.csv")
    assert samples.gpus.tolist() == [2.0]
    assert samples.step_time_s is not None
    assert samples.step_time_s.tolist() == [0.2]


def test_whole_numbers_written_as_floats_are_accepted_for_counts() -> None:
    samples = read_loading_samples(load_file("a,32,4.0,10"), "load.csv")
    assert samples.workers.tolist() == [4.0]


def test_blank_lines_are_skipped_but_still_counted_as_rows() -> None:
    text = load_file("a,32,4,10", "", "a,32,0,10")
    error = refusal_of_loading(text)
    assert error.row == 3
    assert error.column == "workers"


def test_a_blank_first_line_is_refused_because_the_header_must_come_first() -> None:
    error = refusal_of_training("\n" + train_file("16,1e9,1e6,1,0.1"))
    assert str(error) == "train.csv: the first line is blank; the header must be the first line"


def test_loading_rows_keep_pipeline_ids_verbatim() -> None:
    samples = read_loading_samples(load_file("imagenet randaug,64,8,3.5", "cifar,128,2,9"), "l")
    assert samples.pipeline == ("imagenet randaug", "cifar")
    assert samples.workers.tolist() == [8.0, 2.0]
    assert samples.load_rate is not None
    assert samples.load_rate.tolist() == [3.5, 9.0]


def test_target_column_may_be_absent_when_not_required() -> None:
    text = "batch_size,flops,model_params,gpus\n16,1e9,1e6,1\n"
    samples = read_training_samples(text, "query.csv", require_target=False)
    assert samples.step_time_s is None
    assert len(samples) == 1


def test_target_column_is_ignored_when_not_required_even_if_blank() -> None:
    samples = read_loading_samples(load_file("a,32,4,"), "query.csv", require_target=False)
    assert samples.load_rate is None


def test_sample_columns_are_read_only() -> None:
    samples = read_training_samples(train_file("16,1e9,1e6,1,0.1"), "train.csv")
    with pytest.raises(ValueError, match="read-only"):
        samples.flops[0] = 5.0


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (TRAIN_HEADER + "\n", "training"),
        ("batch_size,flops,model_params,gpus\n", "training"),
        (LOAD_HEADER + "\n", "loading"),
        ("pipeline,batch_size,workers\n", "loading"),
        # A loading file that happens to carry a flops column is still a loading file.
        (LOAD_HEADER + ",flops\n", "loading"),
        (TRAIN_HEADER + ",workers\n", "training"),
    ],
)
def test_kind_is_detected_from_the_header(text: str, kind: str) -> None:
    assert detect_kind(text, "s.csv") == kind


def test_read_samples_returns_the_detected_kind() -> None:
    training = read_samples("batch_size,flops,model_params,gpus\n16,1e9,1e6,1\n", "q.csv")
    loading = read_samples("pipeline,batch_size,workers\na,16,2\n", "q.csv")
    assert isinstance(training, TrainingSamples)
    assert isinstance(loading, LoadingSamples)


def test_read_samples_refuses_a_header_of_neither_kind() -> None:
    with pytest.raises(SampleError, match=r"^s\.csv: cannot tell the kind of samples") as caught:
        read_samples("a,b,c\n1,2,3\n", "s.csv")
    assert caught.value.row is None


def test_read_samples_refuses_a_header_mixing_both_kinds() -> None:
    with pytest.raises(SampleError, match="mixes training columns"):
        read_samples(TRAIN_HEADER + ",pipeline,workers\n", "s.csv")


def test_sample_error_is_a_tpm_error_and_a_value_error() -> None:
    error = refusal_of_training("")
    assert isinstance(error, TpmError)
    assert isinstance(error, ValueError)


@pytest.mark.parametrize("text", ["", "\n\n", "  \n"])
def test_empty_file_is_refused(text: str) -> None:
    error = refusal_of_training(text)
    assert str(error) == (
        "train.csv: the file is empty; it needs a header row and one row per sample"
    )
    assert (error.source, error.row, error.column) == ("train.csv", None, None)


def test_header_without_rows_is_refused() -> None:
    error = refusal_of_loading(LOAD_HEADER + "\n\n")
    assert str(error) == "load.csv: no data rows; add one row per sample under the header"


@pytest.mark.parametrize("missing", ["batch_size", "flops", "model_params", "gpus", "step_time_s"])
def test_missing_training_column_is_named(missing: str) -> None:
    header = ",".join(c for c in TRAIN_HEADER.split(",") if c != missing)
    error = refusal_of_training(header + "\n1,2,3,4\n")
    assert error.column == missing
    assert str(error).startswith(f"train.csv: column {missing}: missing column;")
    assert "the header must name batch_size, flops, model_params, gpus, step_time_s" in str(error)


@pytest.mark.parametrize("missing", ["pipeline", "batch_size", "workers", "load_rate"])
def test_missing_loading_column_is_named(missing: str) -> None:
    header = ",".join(c for c in LOAD_HEADER.split(",") if c != missing)
    error = refusal_of_loading(header + "\n1,2,3\n")
    assert error.column == missing
    assert str(error).startswith(f"load.csv: column {missing}: missing column;")


def test_duplicate_column_is_refused() -> None:
    error = refusal_of_training(train_file("1,1,1,1,1,1", header=TRAIN_HEADER + ",gpus"))
    assert error.column == "gpus"
    assert "appears twice" in str(error)


def test_row_with_a_different_number_of_fields_is_refused() -> None:
    error = refusal_of_training(train_file("16,1e9,1e6,1,0.1", "16,1e9,1e6,1"))
    assert (error.row, error.column) == (2, None)
    assert str(error) == (
        "train.csv: row 2: has 4 fields but the header has 5; "
        "give every row one value per header column"
    )


def test_malformed_quoting_is_refused_with_its_row() -> None:
    error = refusal_of_loading(load_file("a,32,4,10", '"b"x,32,4,10'))
    assert error.row == 2
    assert "not valid CSV" in str(error)


@pytest.mark.parametrize(
    ("row", "column", "expected"),
    [
        ("abc,1e9,1e6,1,0.1", "batch_size", "'abc' is not a number; give the mini-batch size"),
        ("16,,1e6,1,0.1", "flops", "empty value; give the forward FLOPs per sample"),
        ("16,1e9,nan,1,0.1", "model_params", "'nan' is not a finite number"),
        ("16,1e9,1e6,1,inf", "step_time_s", "'inf' is not a finite number"),
        ("16,1e9,1e6,1,-inf", "step_time_s", "'-inf' is not a finite number"),
        ("16,1e9,1e6,1,0", "step_time_s", "0 is not positive; the training step time"),
        ("16,1e9,1e6,1,-0.5", "step_time_s", "-0.5 is not positive"),
        ("0,1e9,1e6,1,0.1", "batch_size", "0 is not positive; the mini-batch size per GPU"),
        ("16,-1e9,1e6,1,0.1", "flops", "-1e9 is not positive"),
        ("16,1e9,0,1,0.1", "model_params", "0 is not positive"),
        ("16,1e9,1e6,0,0.1", "gpus", "0 is not positive; the number of GPUs"),
        ("16,1e9,1e6,2.5,0.1", "gpus", "2.5 is not a whole number; the number of GPUs must be"),
        ("16,1e9,1e6,-2,0.1", "gpus", "-2 is not positive"),
    ],
)
def test_bad_training_value_names_file_row_and_column(row: str, column: str, expected: str) -> None:
    error = refusal_of_training(train_file("16,1e9,1e6,1,0.1", row))
    assert (error.source, error.row, error.column) == ("train.csv", 2, column)
    assert str(error).startswith(f"train.csv: row 2, column {column}: {expected}")


@pytest.mark.parametrize(
    ("row", "column", "expected"),
    [
        (",32,4,10", "pipeline", "empty value; give the preprocessing pipeline id"),
        ("a,32,0,10", "workers", "0 is not positive; the number of loader processes"),
        ("a,32,3.5,10", "workers", "3.5 is not a whole number"),
        ("a,32,4,0", "load_rate", "0 is not positive; the mini-batches loaded per second"),
        ("a,32,4,-3", "load_rate", "-3 is not positive"),
        ("a,32,4,NaN", "load_rate", "'NaN' is not a finite number"),
        ("a,-32,4,10", "batch_size", "-32 is not positive"),
        ("a,32,four,10", "workers", "'four' is not a number"),
    ],
)
def test_bad_loading_value_names_file_row_and_column(row: str, column: str, expected: str) -> None:
    error = refusal_of_loading(load_file("a,32,4,10", "a,32,4,10", row))
    assert (error.source, error.row, error.column) == ("load.csv", 3, column)
    assert str(error).startswith(f"load.csv: row 3, column {column}: {expected}")


def test_subset_keeps_the_chosen_samples_in_the_given_order() -> None:
    samples = read_loading_samples(load_file("a,32,1,1", "b,32,2,2", "c,32,3,3"), "l")
    picked = samples.subset(np.array([2, 0], dtype=np.intp))
    assert picked.pipeline == ("c", "a")
    assert picked.workers.tolist() == [3.0, 1.0]
