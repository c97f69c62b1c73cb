"""
Positional encodings in a torch model
=====================================

``kronpe.torch`` holds positional encodings as ordinary ``nn.Module`` objects: they train with
any optimiser, and their kernels are torch custom ops with autograd. Three coordinate networks
learn a photograph from every second pixel (32 x 32 of 64 x 64) for the same number of Adam steps,
and are evaluated on all 64 x 64 pixels:

* an MLP on a NeRF-style sinusoidal embedding (:class:`kronpe.torch.SinusoidalEmbedding`);
* an MLP on learnable Fourier features (:class:`kronpe.torch.LearnableFourierFeatures`);
* a complex (Kronecker) encoding of Gaussians with a linear head
  (:class:`kronpe.torch.ComplexEncoding`), evaluated on the grid as one mode-product chain.

The last model is linear in its weights, so it also has a closed-form fit: the differentiable
layer :func:`kronpe.torch.fit_grid` gives its weights in one call.
"""
import time

import matplotlib.pyplot as plt
import torch

import kronpe
import kronpe.torch as kt

torch.manual_seed(0)
# sphinx_gallery_start_ignore
threads = torch.get_num_threads()
# sphinx_gallery_end_ignore
torch.set_num_threads(1)  # models this small run fastest on one thread
img = torch.from_numpy(kronpe.data.load_sample("astronaut", size=64))  # (64, 64, 3) in [0, 1]
x = torch.arange(64, dtype=torch.float32) / 64  # pixel coordinates
xt = x[::2]  # the training coordinates
train = img[::2, ::2]  # (32, 32, 3)


def points(c):
    return torch.stack(torch.meshgrid(c, c, indexing="ij"), -1).reshape(-1, 2)


emb = [kronpe.Gaussian(32, sigma=0.02, margin=2)] * 2  # 36 Gaussians per axis, 2 beyond each end
models = {
    "NeRF embedding + MLP": torch.nn.Sequential(
        kt.SinusoidalEmbedding(2, 6, "nerf"),  # (P, 2) -> (P, 2 coordinates x 6 frequencies x 2)
        torch.nn.Linear(24, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3)),
    "learnable Fourier + MLP": torch.nn.Sequential(
        kt.LearnableFourierFeatures(pos_dim=2, f_dim=64, h_dim=64, d_dim=32, gamma=0.1),
        torch.nn.ReLU(), torch.nn.Linear(32, 3)),
    "complex encoding": kt.ComplexEncoding(emb, out_features=3),
}


def predict(model, c):
    """The model's image on the grid c x c."""
    if isinstance(model, kt.ComplexEncoding):
        return model.forward_grid([c, c])
    p = points(c)
    if isinstance(model[0], kt.LearnableFourierFeatures):
        p = p[:, None, :]  # positions in groups: (N, G = 1, M = 2)
    return model(p).reshape(len(c), len(c), 3)


steps, curves = 200, {}
for name, model in models.items():
    opt = torch.optim.Adam(model.parameters(), lr=0.05 if isinstance(model, kt.ComplexEncoding) else 5e-3)
    t0 = time.perf_counter()
    curves[name] = []
    for step in range(steps):
        opt.zero_grad()
        loss = torch.mean((predict(model, xt) - train) ** 2)
        loss.backward()
        opt.step()
        curves[name].append(kronpe.data.psnr_of_mse(loss.item()))
    with torch.no_grad():
        full = predict(model, x)
    print(f"{name:26s} train {curves[name][-1]:5.2f} dB, all pixels {kronpe.data.psnr(full, img):5.2f} dB, "
          f"{time.perf_counter() - t0:.1f} s")

# %%
# The closed form: the ridge fit of the training pixels, differentiable with respect to the
# signal and the embeddings. A module starts from the same fit with
# :meth:`~kronpe.torch.ComplexEncoding.from_fit` (here to evaluate it on all pixels).
W = kt.fit_grid(train, emb, coords=[xt, xt], ridge=1e-4)  # (36, 36, 3)
closed = kt.ComplexEncoding.from_fit(kronpe.fit_grid(train.numpy(), emb, coords=[xt.numpy()] * 2, ridge=1e-4))
print("the layer's weights are fit_grid's:", torch.allclose(W.float(), closed.weight.float(), atol=1e-5))
with torch.no_grad():
    full_closed = closed.forward_grid([x, x])
print(f"closed form: all pixels {kronpe.data.psnr(full_closed, img):.2f} dB")

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3.4), gridspec_kw={"width_ratios": [1.2, 2]})
for name, psnrs in curves.items():
    axes[0].plot(psnrs, label=name)
axes[0].set_xlabel("Adam step")
axes[0].set_ylabel("training PSNR (dB)")
axes[0].legend(fontsize=8)
with torch.no_grad():
    row = [img] + [predict(m, x) for m in models.values()] + [full_closed]
axes[1].imshow(torch.cat(row, 1).clamp(0, 1).numpy())
axes[1].set_title("target | NeRF MLP | learnable Fourier | complex (Adam) | complex (closed form)", fontsize=8)
axes[1].set_axis_off()
fig.tight_layout()

# sphinx_gallery_start_ignore
torch.set_num_threads(threads)
# sphinx_gallery_end_ignore
