"""Bug bank of 00_start_here."""
from . import right, wrong

VARIANTS = [
    right("tensor_shape_quiz", "tuples", """
        def tensor_shape_quiz():
            return {"Q": (2, 5, 4), "K": (2, 5, 4), "V": (2, 5, 4),
                    "scores": (2, 5, 5), "weights": (2, 5, 5), "out": (2, 5, 4)}
    """),
    right("tensor_shape_quiz", "computed-with-torch", """
        def tensor_shape_quiz():
            x, w = torch.randn(2, 5, 8), torch.randn(8, 4)
            q = k = v = x @ w
            s = q @ k.transpose(-2, -1)
            return {"Q": q.shape, "K": k.shape, "V": v.shape, "scores": s.shape,
                    "weights": s.softmax(-1).shape, "out": (s @ v).shape}
    """),
    wrong("tensor_shape_quiz", "scores-BTD", "quiz-scores-shape", """
        def tensor_shape_quiz():
            return {"Q": (2, 5, 4), "K": (2, 5, 4), "V": (2, 5, 4),
                    "scores": (2, 5, 4), "weights": (2, 5, 4), "out": (2, 5, 4)}
    """),
    wrong("tensor_shape_quiz", "out-width-C", "quiz-out-width", """
        def tensor_shape_quiz():
            return {"Q": (2, 5, 4), "K": (2, 5, 4), "V": (2, 5, 4),
                    "scores": (2, 5, 5), "weights": (2, 5, 5), "out": (2, 5, 8)}
    """),
    wrong("tensor_shape_quiz", "projection-C", "quiz-projection-shape", """
        def tensor_shape_quiz():
            return {"Q": (2, 5, 8), "K": (2, 5, 8), "V": (2, 5, 8),
                    "scores": (2, 5, 5), "weights": (2, 5, 5), "out": (2, 5, 8)}
    """),
    wrong("tensor_shape_quiz", "out-like-weights", "quiz-out-is-weights", """
        def tensor_shape_quiz():
            return {"Q": (2, 5, 4), "K": (2, 5, 4), "V": (2, 5, 4),
                    "scores": (2, 5, 5), "weights": (2, 5, 5), "out": (2, 5, 5)}
    """),
    wrong("tensor_shape_quiz", "no-batch-dim", "quiz-batch-dropped", """
        def tensor_shape_quiz():
            return {"Q": (5, 4), "K": (5, 4), "V": (5, 4), "scores": (5, 5), "weights": (5, 5), "out": (5, 4)}
    """),
    wrong("tensor_shape_quiz", "missing-key", "quiz-missing-key", """
        def tensor_shape_quiz():
            return {"Q": (2, 5, 4), "K": (2, 5, 4), "V": (2, 5, 4), "scores": (2, 5, 5)}
    """),
    wrong("tensor_shape_quiz", "stub", "not-implemented", """
        def tensor_shape_quiz():
            # YOUR CODE HERE
            raise NotImplementedError()
    """),
]
