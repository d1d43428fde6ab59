"""Bug bank of 09_rope."""
from . import fits_visible, right, wrong

_QUIZ = '''
def quiz_rope():
    return {{"n_pairs": {n_pairs}, "angle": {angle}, "period": {period}, "pi_position": {pi_position},
             "rotate_v": {rotate_v}, "cached_angle": {cached_angle}}}
'''


def quiz(n_pairs="32", angle="0.5", period="2 * math.pi * 100", pi_position="2500", rotate_v="False",
         cached_angle="20.3") -> str:
    return _QUIZ.format(n_pairs=n_pairs, angle=angle, period=period, pi_position=pi_position, rotate_v=rotate_v,
                        cached_angle=cached_angle)


VARIANTS = [
    # --- rope_angles ---
    right("rope_angles", "outer-inv-freq", """
        def rope_angles(T, head_dim, base=10000.0):
            inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))   # (d/2,)
            return torch.outer(torch.arange(T).float(), inv_freq)                         # (T, d/2)
    """),
    right("rope_angles", "exp-log", """
        def rope_angles(T, head_dim, base=10000.0):
            i = torch.arange(head_dim // 2)
            theta = torch.exp(-2 * i / head_dim * math.log(base))
            return torch.arange(T)[:, None] * theta
    """),
    right("rope_angles", "python-loops", """
        def rope_angles(T, head_dim, base=10000.0):
            rows = [[m * base ** (-2 * i / head_dim) for i in range(head_dim // 2)] for m in range(T)]
            return torch.tensor(rows)
    """),
    right("rope_angles", "einsum-float64", """
        def rope_angles(T, head_dim, base=10000.0):
            theta = torch.pow(torch.tensor(base, dtype=torch.float64),
                              -torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
            return torch.einsum("m,i->mi", torch.arange(T, dtype=torch.float64), theta)
    """),
    wrong("rope_angles", "exponent-i-over-d", "rope-exponent-i-over-d", """
        def rope_angles(T, head_dim, base=10000.0):
            i = torch.arange(head_dim // 2).float()
            theta = base ** (-i / head_dim)
            return torch.arange(T).float()[:, None] * theta[None, :]
    """),
    wrong("rope_angles", "positive-exponent", "rope-exponent-sign", """
        def rope_angles(T, head_dim, base=10000.0):
            theta = base ** (torch.arange(0, head_dim, 2).float() / head_dim)
            return torch.outer(torch.arange(T).float(), theta)
    """),
    wrong("rope_angles", "linspace-exponent", "rope-exponent-linspace", """
        def rope_angles(T, head_dim, base=10000.0):
            theta = base ** (-torch.linspace(0, 1, head_dim // 2))
            return torch.outer(torch.arange(T).float(), theta)
    """),
    wrong("rope_angles", "step-two-doubled", "rope-exponent-doubled", """
        def rope_angles(T, head_dim, base=10000.0):
            i = torch.arange(0, head_dim, 2).float()                  # 0, 2, 4, ... already 2i
            theta = base ** (-2 * i / head_dim)
            return torch.arange(T).float()[:, None] * theta
    """),
    wrong("rope_angles", "positions-from-one", "rope-positions-from-one", """
        def rope_angles(T, head_dim, base=10000.0):
            theta = base ** (-torch.arange(0, head_dim, 2).float() / head_dim)
            positions = torch.arange(1, T + 1).float()
            return torch.outer(positions, theta)
    """),
    wrong("rope_angles", "transposed", "rope-angles-transposed", """
        def rope_angles(T, head_dim, base=10000.0):
            theta = base ** (-torch.arange(0, head_dim, 2).float() / head_dim)
            return torch.outer(theta, torch.arange(T).float())
    """),
    wrong("rope_angles", "cos-cache-width", "rope-angles-full-width", """
        def rope_angles(T, head_dim, base=10000.0):
            theta = base ** (-torch.arange(0, head_dim, 2).float() / head_dim)
            freqs = torch.outer(torch.arange(T).float(), theta)
            return torch.cat([freqs, freqs], dim=-1)
    """),
    wrong("rope_angles", "no-position", "rope-angles-no-position", """
        def rope_angles(T, head_dim, base=10000.0):
            theta = base ** (-torch.arange(0, head_dim, 2).float() / head_dim)
            return theta.expand(T, -1)
    """),
    wrong("rope_angles", "base-hardcoded", "rope-base-ignored", """
        def rope_angles(T, head_dim, base=10000.0):
            theta = 10000.0 ** (-torch.arange(0, head_dim, 2).float() / head_dim)
            return torch.outer(torch.arange(T).float(), theta)
    """),
    wrong("rope_angles", "stub", "not-implemented", """
        def rope_angles(T, head_dim, base=10000.0):
            # YOUR CODE HERE
            raise NotImplementedError()
    """),
    # --- apply_rope (rotate-half) ---
    right("apply_rope", "halves-cat", """
        def apply_rope(x, angles):
            x1, x2 = x.chunk(2, dim=-1)
            cos, sin = torch.cos(angles), torch.sin(angles)
            return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    """),
    right("apply_rope", "hf-rotate-half-cache", """
        def apply_rope(x, angles):
            def rotate_half(t):
                t1, t2 = t[..., : t.shape[-1] // 2], t[..., t.shape[-1] // 2 :]
                return torch.cat((-t2, t1), dim=-1)
            emb = torch.cat((angles, angles), dim=-1)          # (T, d): the precomputed cos/sin cache
            cos, sin = emb.cos(), emb.sin()
            return x * cos + rotate_half(x) * sin
    """),
    right("apply_rope", "complex-polar", """
        def apply_rope(x, angles):
            half = x.shape[-1] // 2
            z = torch.complex(x[..., :half].contiguous(), x[..., half:].contiguous())
            z = z * torch.polar(torch.ones_like(angles), angles)
            return torch.cat([z.real, z.imag], dim=-1)
    """),
    right("apply_rope", "view-as-complex-halves", """
        def apply_rope(x, angles):
            x1, x2 = x.chunk(2, dim=-1)
            z = torch.view_as_complex(torch.stack([x1, x2], dim=-1).contiguous())   # (..., T, d/2) complex
            z = z * torch.polar(torch.ones_like(angles), angles)                    # rotate: multiply by e^{i·angle}
            out = torch.view_as_real(z)                                             # (..., T, d/2, 2)
            return torch.cat([out[..., 0], out[..., 1]], dim=-1)
    """),
    right("apply_rope", "rotation-matrix-einsum", """
        def apply_rope(x, angles):
            cos, sin = angles.cos(), angles.sin()
            R = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)  # (T, d/2, 2, 2)
            pairs = x.unflatten(-1, (2, -1)).transpose(-1, -2)                                # (..., T, d/2, 2)
            out = torch.einsum("tiab,...tib->...tia", R, pairs)                               # (..., T, d/2, 2)
            return out.transpose(-1, -2).flatten(-2)
    """),
    right("apply_rope", "full-block-matrix", """
        def apply_rope(x, angles):
            T, h = angles.shape
            cos, sin = torch.diag_embed(angles.cos()), torch.diag_embed(angles.sin())  # (T, h, h)
            R = torch.cat([torch.cat([cos, -sin], -1), torch.cat([sin, cos], -1)], -2)  # (T, d, d)
            return (R @ x.unsqueeze(-1)).squeeze(-1)
    """),
    right("apply_rope", "empty-like-halves", """
        def apply_rope(x, angles):
            h = x.shape[-1] // 2
            out = torch.empty_like(x)
            out[..., :h] = x[..., :h] * angles.cos() - x[..., h:] * angles.sin()
            out[..., h:] = x[..., :h] * angles.sin() + x[..., h:] * angles.cos()
            return out
    """),
    wrong("apply_rope", "interleaved-pairs", "rope-interleaved-layout", """
        def apply_rope(x, angles):
            x1, x2 = x[..., 0::2], x[..., 1::2]
            cos, sin = angles.cos(), angles.sin()
            return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
    """),
    wrong("apply_rope", "complex-view-llama-meta", "rope-interleaved-layout", """
        def apply_rope(x, angles):
            z = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
            z = z * torch.polar(torch.ones_like(angles), angles)
            return torch.view_as_real(z).flatten(-2).type_as(x)
    """),
    wrong("apply_rope", "sign-flipped", "rope-sign-flipped", """
        def apply_rope(x, angles):
            x1, x2 = x.chunk(2, dim=-1)
            cos, sin = angles.cos(), angles.sin()
            return torch.cat([x1 * cos + x2 * sin, -x1 * sin + x2 * cos], dim=-1)
    """),
    wrong("apply_rope", "rotate-half-wrong-sign", "rope-sign-flipped", """
        def apply_rope(x, angles):
            x1, x2 = x.chunk(2, dim=-1)
            rotated = torch.cat([x2, -x1], dim=-1)
            emb = torch.cat([angles, angles], dim=-1)
            return x * emb.cos() + rotated * emb.sin()
    """),
    wrong("apply_rope", "cache-repeat-interleave", "rope-cache-layout-mixed", """
        def apply_rope(x, angles):
            x1, x2 = x.chunk(2, dim=-1)
            rotated = torch.cat([-x2, x1], dim=-1)
            emb = angles.repeat_interleave(2, dim=-1)
            return x * emb.cos() + rotated * emb.sin()
    """),
    wrong("apply_rope", "halves-swapped", "rope-output-order", """
        def apply_rope(x, angles):
            x1, x2 = x.chunk(2, dim=-1)
            cos, sin = angles.cos(), angles.sin()
            return torch.cat([x1 * sin + x2 * cos, x1 * cos - x2 * sin], dim=-1)
    """),
    wrong("apply_rope", "forgot-sin", "rope-not-a-rotation", """
        def apply_rope(x, angles):
            emb = torch.cat([angles, angles], dim=-1)
            return x * emb.cos()
    """),
    wrong("apply_rope", "in-place", "modified-input", """
        def apply_rope(x, angles):
            half = x.shape[-1] // 2
            x1, x2 = x[..., :half].clone(), x[..., half:].clone()
            cos, sin = angles.cos(), angles.sin()
            x[..., :half] = x1 * cos - x2 * sin
            x[..., half:] = x1 * sin + x2 * cos
            return x
    """),
    wrong("apply_rope", "stub", "not-implemented", """
        def apply_rope(x, angles):
            # YOUR CODE HERE
            raise NotImplementedError()
    """),
    # --- apply_rope_interleaved (RoFormer) ---
    right("apply_rope_interleaved", "stack-flatten", """
        def apply_rope_interleaved(x, angles):
            x1, x2 = x[..., ::2], x[..., 1::2]
            cos, sin = angles.cos(), angles.sin()
            return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
    """),
    right("apply_rope_interleaved", "complex-view-as-complex", """
        def apply_rope_interleaved(x, angles):
            z = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())   # (..., T, d/2)
            freqs_cis = torch.polar(torch.ones_like(angles), angles)                  # (T, d/2)
            return torch.view_as_real(z * freqs_cis).flatten(-2)
    """),
    right("apply_rope_interleaved", "rotate-every-two-cache", """
        def apply_rope_interleaved(x, angles):
            def rotate_every_two(t):
                return torch.stack((-t[..., 1::2], t[..., ::2]), dim=-1).flatten(-2)
            cos = angles.cos().repeat_interleave(2, dim=-1)     # (T, d): precomputed cache
            sin = angles.sin().repeat_interleave(2, dim=-1)
            return x * cos + rotate_every_two(x) * sin
    """),
    right("apply_rope_interleaved", "via-permutation", """
        def apply_rope_interleaved(x, angles):
            d = x.shape[-1]
            perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])   # interleaved -> halves
            h = x[..., perm]
            h1, h2 = h[..., : d // 2], h[..., d // 2 :]
            cos, sin = angles.cos(), angles.sin()
            rotated = torch.cat([h1 * cos - h2 * sin, h1 * sin + h2 * cos], dim=-1)
            return rotated[..., torch.argsort(perm)]
    """),
    right("apply_rope_interleaved", "rotation-matrix", """
        def apply_rope_interleaved(x, angles):
            c, s = angles.cos(), angles.sin()
            R = torch.stack([c, -s, s, c], dim=-1).unflatten(-1, (2, 2))      # (T, d/2, 2, 2)
            pairs = x.unflatten(-1, (-1, 2)).unsqueeze(-1)                      # (..., T, d/2, 2, 1)
            return (R @ pairs).squeeze(-1).flatten(-2)
    """),
    right("apply_rope_interleaved", "strided-assign", """
        def apply_rope_interleaved(x, angles):
            even, odd = x[..., 0::2], x[..., 1::2]
            out = x.clone()
            out[..., 0::2] = even * angles.cos() - odd * angles.sin()
            out[..., 1::2] = even * angles.sin() + odd * angles.cos()
            return out
    """),
    wrong("apply_rope_interleaved", "halves", "rope-half-layout", """
        def apply_rope_interleaved(x, angles):
            x1, x2 = x.chunk(2, dim=-1)
            cos, sin = angles.cos(), angles.sin()
            return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    """),
    wrong("apply_rope_interleaved", "complex-conjugate", "rope-sign-flipped", """
        def apply_rope_interleaved(x, angles):
            z = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
            return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles).conj()).flatten(-2)
    """),
    wrong("apply_rope_interleaved", "sign-flipped", "rope-sign-flipped", """
        def apply_rope_interleaved(x, angles):
            x1, x2 = x[..., ::2], x[..., 1::2]
            cos, sin = angles.cos(), angles.sin()
            return torch.stack([x1 * cos + x2 * sin, x2 * cos - x1 * sin], dim=-1).flatten(-2)
    """),
    wrong("apply_rope_interleaved", "cache-cat", "rope-cache-layout-mixed", """
        def apply_rope_interleaved(x, angles):
            rotated = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
            emb = torch.cat([angles, angles], dim=-1)
            return x * emb.cos() + rotated * emb.sin()
    """),
    wrong("apply_rope_interleaved", "written-back-as-halves", "rope-output-order", """
        def apply_rope_interleaved(x, angles):
            x1, x2 = x[..., ::2], x[..., 1::2]
            cos, sin = angles.cos(), angles.sin()
            return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    """),
    wrong("apply_rope_interleaved", "cos-on-both", "rope-not-a-rotation", """
        def apply_rope_interleaved(x, angles):
            x1, x2 = x[..., ::2], x[..., 1::2]
            cos, sin = angles.cos(), angles.sin()
            return torch.stack([x1 * cos - x2 * sin, x1 * cos + x2 * cos], dim=-1).flatten(-2)
    """),
    wrong("apply_rope_interleaved", "stub", "not-implemented", """
        def apply_rope_interleaved(x, angles):
            # YOUR CODE HERE
            raise NotImplementedError()
    """),
    # --- quiz_rope ---
    right("quiz_rope", "numbers", quiz()),
    right("quiz_rope", "computed", """
        def quiz_rope():
            d, base = 64, 10000.0
            theta = lambda i: base ** (-2 * i / d)
            return {"n_pairs": d // 2, "angle": 5 * theta(8), "period": 2 * math.pi / theta(16),
                    "pi_position": 10000 * 4096 / 16384, "rotate_v": False, "cached_angle": (200 + 4 - 1) * theta(8)}
    """),
    right("quiz_rope", "stub-filled-in", """
        def quiz_rope():
            n_pairs = 32
            angle = 5 * 10000 ** -0.25
            period = 2 * math.pi / 10000 ** -0.5
            pi_position = 10000 / 4
            rotate_v = False
            cached_angle = torch.tensor(203 * 0.1)
            return {"n_pairs": n_pairs, "angle": angle, "period": period, "pi_position": pi_position,
                    "rotate_v": rotate_v, "cached_angle": cached_angle}
    """),
    right("quiz_rope", "rounded", quiz(period="628.3", pi_position="2500.0")),
    wrong("quiz_rope", "pairs-d", "quiz-rope-pairs", quiz(n_pairs="64")),
    wrong("quiz_rope", "angle-i-over-d", "rope-exponent-i-over-d", quiz(angle="5 * 10000 ** (-8 / 64)")),
    wrong("quiz_rope", "angle-from-one", "rope-positions-from-one", quiz(angle="0.6")),
    wrong("quiz_rope", "period-no-2pi", "quiz-rope-period-no-2pi", quiz(period="100")),
    wrong("quiz_rope", "period-is-frequency", "quiz-rope-period-as-frequency", quiz(period="0.01")),
    wrong("quiz_rope", "interpolation-inverted", "quiz-rope-interpolation-inverted", quiz(pi_position="40000")),
    wrong("quiz_rope", "rotate-v", "rope-on-values", quiz(rotate_v="True")),
    wrong("quiz_rope", "cached-angle-not-a-number", "wrong-type", quiz(cached_angle="'203 * 0.1'")),
    fits_visible("quiz_rope", "cache-offset-forgotten", "quiz-rope-cache-offset", quiz(cached_angle="3 * 0.1")),
    fits_visible("quiz_rope", "cache-position-from-one", "rope-positions-from-one", quiz(cached_angle="204 * 0.1")),
    fits_visible("quiz_rope", "cache-first-new-token", "wrong", quiz(cached_angle="200 * 0.1")),
    wrong("quiz_rope", "missing-key", "quiz-missing-key", """
        def quiz_rope():
            return {"n_pairs": 32, "angle": 0.5, "period": 628.3, "pi_position": 2500, "rotate_v": False}
    """),
    wrong("quiz_rope", "stub", "not-implemented", """
        def quiz_rope():
            # YOUR CODE HERE
            raise NotImplementedError()
    """),
    # --- a known mistake's numbers on one case only: no diagnosis (compare.confirmed) ---
    # planted: positions from 1 where T = 6, right elsewhere
    wrong("rope_angles", "positions-from-one-on-one-input", "wrong", """
        def rope_angles(T, head_dim, base=10000.0):
            theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
            return torch.outer(torch.arange(T, dtype=torch.float64) + (T == 6), theta)
    """),
]
