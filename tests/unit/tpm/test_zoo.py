import pytest

from tpm.errors import UnknownModel
from tpm.zoo import model_features, resnet_stages, vgg_stages


@pytest.mark.parametrize(
    ("name", "gflops", "mparams"),
    [
        ("Resnet18", 1.81, 11.69),  # torchvision's published counts
        ("Resnet34", 3.66, 21.80),
        ("Resnet50", 4.09, 25.56),
        ("VGG13", 11.2, 9.9),  # A-Dloader Table III (global pooling head)
        ("Resnet28", 3.0, 19.0),
        ("mdResnet12", 0.3, 1.8),
    ],
)
def test_counts_match_published_figures(name: str, gflops: float, mparams: float) -> None:
    features = model_features(name)
    assert features.model_params / 1e6 == pytest.approx(mparams, rel=0.06)
    assert features.flops / 1e9 == pytest.approx(gflops, rel=0.07)


def test_narrow_variants_shrink_by_their_width_squared() -> None:
    full, md, sm = (model_features(f"{w}Resnet18") for w in ("", "md", "sm"))
    # Convolutions scale with width squared; the stem and the classifier do not.
    assert 3.5 < full.flops / md.flops < 4.5
    assert 12 < full.flops / sm.flops < 17
    assert full.model_params > md.model_params > sm.model_params


def test_deeper_models_cost_more() -> None:
    depths = [model_features(f"Resnet{d}").flops for d in (10, 12, 18, 28, 34)]
    assert depths == sorted(depths)
    assert sum(resnet_stages(28)) == 13
    assert sum(vgg_stages(7)) == 6


@pytest.mark.parametrize("name", ["Resnet19", "Resnet60", "VGG3", "AlexNet", "xxResnet18"])
def test_unknown_models_say_which_forms_exist(name: str) -> None:
    with pytest.raises(UnknownModel) as raised:
        model_features(name)
    assert raised.value.where == "model"
