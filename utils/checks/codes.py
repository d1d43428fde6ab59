"""The misconception codes: one table for the checks, the docs and the class report.

Every failing check raises ``CheckError(code, ...)`` with a code from this table; the
message shown to the learner is the specific finding followed by the misconception and
the hint below. docs/misconceptions.md is generated from this table.
"""
from __future__ import annotations

# code: (误区 — the likely misconception, 提示 — what to look at)
CODES: dict[str, tuple[str, str]] = {
    # --- generic -------------------------------------------------------------------
    "not-implemented": ("练习还没有写（函数体仍是 raise NotImplementedError）。",
                        "删掉 raise NotImplementedError 那一行，写上你的实现后重新运行定义它的单元格。"),
    "crashed": ("代码在运行时抛出了异常。", "看上面指出的那一行；先用小张量逐行打印形状排查。"),
    "wrong-type": ("返回值的类型不对。", "对照题目要求的返回类型（张量、元组、字典、float……）。"),
    "wrong-shape": ("输出形状不对，通常是矩阵乘法或转置的维度搞错了。",
                    "在每一行后面写下形状注释，例如 # (B, T, D)。"),
    "modified-input": ("函数原地修改了输入张量。", "避免对输入使用 +=、masked_fill_ 等原地操作；先 clone 或用非原地版本。"),
    "nan-output": ("输出里出现了 NaN 或 inf。", "检查 exp 是否溢出、是否出现 0/0 或 -inf - (-inf)。"),
    "tampered": ("notebook 替换了 PyTorch、内置函数或检查函数本身（例如 torch.allclose = ...）。",
                 "删掉替换这些函数的代码，重启内核后从头运行；检查只能验证真实的实现。"),
    "uses-reference": ("练习没有自己实现，而是导入了课程的参考实现（utils.reference）。",
                       "卡住时可以去看参考答案，但提交的练习单元格里要写你自己的实现。"),
    "kernel-died": ("某个单元格让 Python 内核退出了（exit()、os._exit()、崩溃或内存耗尽）。",
                    "提交前不要调用 exit/sys.exit/os._exit；用 Restart & Run All 确认 notebook 能从头跑到尾。"),
    "timeout": ("某个单元格运行时间过长（可能是死循环），评分时被中断。", "检查循环的结束条件；评分时每个单元格都有时间上限。"),
    "wrong": ("结果与参考答案不一致，且不符合任何已知的常见误区。", "用题目里的小例子手算一遍，对比每一步的中间结果。"),
    # --- 00 ------------------------------------------------------------------------
    "quiz-missing-key": ("测验答案缺少某个键。", "字典里要包含题目列出的全部键。"),
    "quiz-scores-shape": ("把分数表的形状写成了 [B, T, D]。", "分数表是每个位置对每个位置打分：[B, T, T]。"),
    "quiz-out-width": ("以为注意力输出的宽度是 C。", "输出是对 V 的加权和，宽度跟 V 一样是 D。"),
    "quiz-projection-shape": ("投影后的宽度写错了。", "X 的最后一维 C 乘上 [C, D] 的矩阵后变成 D。"),
    # --- 01 ------------------------------------------------------------------------
    "weights-transposed": ("把 X @ W 写成了 X @ Wᵀ（或把 W 当成 nn.Linear 的 [out, in] 布局）。",
                           "本题的函数式权重是数学写法：W 的形状是 [C, D]，直接 X @ W。"),
    "qkv-mixed-up": ("Q、K、V 用错了权重矩阵或返回顺序不对。", "Q 用 W_Q、K 用 W_K、V 用 W_V，按 (q, k, v) 的顺序返回。"),
    "qk-swapped": ("查询和键的角色对调了：算成了 K Qᵀ（或 q 用了 key 层、k 用了 query 层）。",
                   "行是查询位置 t、列是键位置 s：S[t, s] = q_t · k_s，即 q @ k.transpose(-2, -1)。"),
    "transpose-all-dims": ("用 k.T 转置了所有维度（批次维也被翻转了）。",
                           "只转置最后两维：k.transpose(-2, -1)（或 k.mT）。"),
    "unexpected-scale": ("这一题要的是未缩放的 Q Kᵀ，却已经除了 √D。", "缩放放在第 02 节；这里只算点积。"),
    # --- 02 ------------------------------------------------------------------------
    "variance-as-std": ("返回了标准差而不是方差。", "方差 = 标准差²；推导里 Var(q·k) = D。"),
    "variance-of-one-term": ("只算了单个乘积项 q_d·k_d 的方差，没有对 D 项求和。",
                             "先对每个样本求点积（沿维度求和），再对样本求方差。"),
    "variance-wrong-distribution": ("采样分布不对（例如用了均匀分布 torch.rand）。", "q、k 的每个分量应来自标准正态分布 torch.randn。"),
    "ignores-generator": ("没有把 generator 传给随机数函数，结果不可复现。", "torch.randn(..., generator=generator)。"),
    "scale-missing": ("没有除以 √D。", "分数的方差是 D，除以 √D 才能把方差缩回 1。"),
    "scale-by-D": ("除以了 D 而不是 √D。", "方差要除以 (√D)² = D，所以分数本身除以 √D。"),
    "scale-inverted": ("乘了 √D 而不是除以 √D。", "scale = 1 / math.sqrt(D)。"),
    "scale-by-sqrt-C": ("按模型宽度 C 而不是头宽 D 缩放。", "缩放用被点积的向量的长度：q.size(-1)。"),
    "scale-by-sqrt-T": ("按序列长度 T 缩放。", "方差来自 D 个分量求和，与 T 无关：用 q.size(-1)。"),
    "scale-by-value-dim": ("按 V 的宽度缩放。", "缩放只跟 q·k 的长度有关：用 q.size(-1)，而不是 v.size(-1)。"),
    "uses-builtin-softmax": ("调用了 PyTorch 自带的 softmax（本题要求手写）。", "用 exp、max、sum 自己实现。"),
    "softmax-wrong-dim": ("softmax 沿错误的维度归一化（或忽略了 dim 参数）。",
                          "对 dim 这一维求 max 和 sum，并用 keepdim=True 保持形状以便广播。"),
    "no-max-subtraction": ("没有先减去最大值，输入很大时 exp 溢出成 inf，结果变成 NaN。",
                           "softmax(x) = softmax(x - max(x))：先减去该维的最大值再 exp。"),
    "global-max-subtraction": ("减去的是整个张量的最大值，而不是每一行自己的最大值。",
                               "不同行的数值尺度可能差很多：对 dim 维求 max(dim, keepdim=True)。"),
    "not-normalized": ("忘了除以求和，结果不是概率分布。", "每一行（沿 dim）要除以 exp 的总和，使其和为 1。"),
    "jacobian-sign": ("雅可比矩阵的符号反了：写成了 p pᵀ − diag(p)。", "∂p_i/∂z_i = p_i(1 − p_i) ≥ 0，所以对角线为正。"),
    "jacobian-diag-only": ("只保留了对角线部分，漏掉了 −p pᵀ 的交叉项。",
                           "∂p_i/∂z_j = −p_i p_j（i ≠ j）：每个输出都依赖所有输入。"),
    "jacobian-outer-only": ("只写了 −p pᵀ，漏掉了 diag(p)。", "J = diag(p) − p pᵀ。"),
    # --- 03 ------------------------------------------------------------------------
    "outputs-swapped": ("返回值顺序反了：应为 (out, weights)。", "先返回加权求和的输出，再返回注意力权重。"),
    "mask-reversed": ("掩码方向反了：把 True 当成了“屏蔽”。",
                      "本课程约定 True = 可以看（与 F.scaled_dot_product_attention 相同）；屏蔽的是 ~mask。"),
    "mask-after-softmax": ("先 softmax 再把不可见位置置 0，每行权重之和不再是 1。",
                           "在 softmax 之前把不可见位置的分数填成 -inf。"),
    "mask-fill-zero": ("把不可见位置的分数填成了 0 而不是 -inf，exp(0) = 1 仍然分到权重。",
                       "填 float('-inf')（或一个足够小的数），softmax 之后才会是 0。"),
    "mask-ignored": ("忽略了 mask 参数。", "mask 不为 None 时，在 softmax 前用 masked_fill(~mask, -inf)。"),
    "weights-not-normalized": ("注意力权重每行之和不是 1。", "对最后一维做 softmax。"),
    "not-causal": ("没有因果掩码：当前位置看到了未来的 token。", "用下三角 tril 在 softmax 之前把未来位置填成 -inf。"),
    "tril-not-buffer": ("tril 不是用 register_buffer 注册的缓冲区（或被注册成了参数）。",
                        "self.register_buffer('tril', torch.tril(torch.ones(L, L)))：它跟着模型走，但不参与训练。"),
    "tril-not-sliced": ("没有把 tril 切到当前长度 T，T < context_length 时出错。", "用 self.tril[:T, :T]。"),
    "linear-layout": ("Head 的 key/query/value 层不符合要求。",
                      "三个 nn.Linear(n_embed, head_size, bias=False)，名字分别是 key、query、value。"),
    # --- 04 ------------------------------------------------------------------------
    "mask-not-bool": ("掩码用了 float 或 int，而不是 bool。",
                      "本课程的掩码一律是 torch.bool，True = 可以看；float 掩码在 masked_fill / SDPA 里含义不同。"),
    "mask-diagonal-excluded": ("因果掩码把对角线也屏蔽了（tril(-1) 或 triu(0)）：位置 t 看不到自己。",
                               "位置 t 可以看 0…t，包括自己：torch.tril(torch.ones(T, T, dtype=torch.bool))。"),
    "ignores-device": ("没有把掩码建在指定的 device 上。", "torch.ones(T, T, dtype=torch.bool, device=device)。"),
    "padding-off-by-one": ("padding 掩码差了一位（用了 <= 或 length - 1）。", "位置 0…length-1 是真实 token：positions < length。"),
    "padding-left": ("按左侧补齐来构造了 padding 掩码。", "本题是右侧补齐：真实 token 在前，padding 在后。"),
    "mask-not-broadcastable": ("组合掩码的形状是 [B, T, T]，不能和 [B, H, T, T] 的分数广播。",
                               "在批次维后面插入头维：[B, 1, T, T]（例如 mask[:, None]）。"),
    "padding-on-query-axis": ("padding 掩码加在了查询轴（行）上，而不是键轴（列）上。",
                              "要屏蔽的是“看向 padding 键”的列：key_padding[b, s] 放在最后一维 [:, None, :]。"),
    "mask-combined-with-or": ("用“或”组合了两个掩码。", "两个条件都满足才可以看：causal & key_padding。"),
    "nan-on-fully-masked": ("一整行都被屏蔽时得到 NaN（softmax 面对全 -inf）。",
                            "先处理全屏蔽的行：例如 torch.where(mask.any(-1, keepdim=True), weights, 0) 或 nan_to_num。"),
    "fully-masked-uniform": ("用 -1e9 之类的有限值填充，整行被屏蔽时变成了均匀分布。",
                             "全屏蔽的行应输出全 0（与 F.scaled_dot_product_attention 一致），而不是平均地看所有位置。"),
    "nan-gradient": ("全屏蔽的行让梯度出现了 NaN。", "让全屏蔽行的输出不依赖 NaN：先把这些行的分数替换成有限值，或用 where/nan_to_num。"),
    "dtype-not-preserved": ("低精度输入没有按原 dtype 返回。", "在 float32 中做归约，最后 .to(scores.dtype) 转回来。"),
    "is-causal-false-alarm": ("把一个因果函数判成了非因果：很可能改动了过去/当前位置，或比较了被改动位置之后的输出。",
                              "只改动位置 t 之后的输入，只比较位置 0…t 的输出；对每个 t 都做一遍。"),
    "is-causal-missed-leak": ("漏掉了偷看未来的函数：很可能只检查了某些位置（例如只看位置 0 或只改动最后一个位置）或容差太大。",
                              "对每个 t：随机改动 t 之后的全部输入，检查 0…t 的输出是否完全不变（用很小的容差）。"),
    # --- 05 ------------------------------------------------------------------------
    "view-without-transpose": ("直接 view 成 [B, H, T, Dh]，没有先 view 成 [B, T, H, Dh] 再 transpose(1, 2)。",
                               "view 只改变“怎么读”同一串内存：先按 [B, T, H, Dh] 切开每个 token 的通道，再交换 T 和 H。"),
    "heads-strided": ("把通道按步长分给各头（reshape 成 [B, T, Dh, H]），头 h 拿到的不是连续的一段通道。",
                      "头 h 对应通道 [h·Dh, (h+1)·Dh)：x.view(B, T, H, Dh).transpose(1, 2)。"),
    "merge-without-transpose": ("合并多头时没有先把 H 和 T 换回来。", "x.transpose(1, 2).reshape(B, T, H * Dh)（或 .contiguous().view）。"),
    "view-needs-contiguous": ("对 transpose 之后的张量直接 .view，内存不连续而报错。", "用 .reshape，或先 .contiguous() 再 .view。"),
    "head-size": ("每个头的宽度不是 n_embed // n_head。", "多头把 C 平分给 H 个头：Dh = C // H，拼接后回到 C。"),
    "proj-missing": ("拼接之后没有经过输出投影 proj。", "最后一步：self.proj(concat)，让各头的信息混合。"),
    "heads-concat-order": ("各头输出拼接的顺序不对。", "按 heads[0], heads[1], … 的顺序沿最后一维拼接。"),
    "loop-over-heads": ("向量化版本里仍然有对头的 Python 循环。", "把所有头放进一个 [B, H, T, Dh] 张量，一次矩阵乘法算完。"),
    "qkv-interleaved": ("把 qkv 的输出按“每个头的 [q|k|v] 交错”来切分。",
                        "本题约定 qkv(x) 的输出是 [q | k | v] 三大块（各 n_embed 宽）：qkv(x).split(n_embed, dim=-1)。"),
    "copy-qkv-order": ("复制权重时 q、k、v 三块的顺序错了。", "qkv.weight 的行依次是 [W_q; W_k; W_v]，每块按头的顺序堆叠。"),
    "copy-proj-missing": ("没有复制输出投影 proj 的权重和偏置。", "fused.proj.weight / bias 也要从 looped.proj 复制。"),
    # --- 06 ------------------------------------------------------------------------
    # --- 07 ------------------------------------------------------------------------
    # --- 08 ------------------------------------------------------------------------
    # --- 09 ------------------------------------------------------------------------
    # --- 10 ------------------------------------------------------------------------
}


def describe(code: str) -> tuple[str, str]:
    """(misconception, hint) for a code; unknown codes get the generic [wrong] text."""
    return CODES.get(code, CODES["wrong"])


def markdown_table() -> str:
    """The codes as a Markdown table (docs/misconceptions.md is generated from it)."""
    lines = ["| 代码 | 可能的误区 | 提示 |", "|---|---|---|"]
    for code, (misconception, hint) in CODES.items():
        lines.append(f"| `[{code}]` | {misconception} | {hint} |")
    return "\n".join(lines) + "\n"
