/* act.glsl — the gated activation of a feed-forward block, as the CPU
 * computes it: act(g) * up, act SiLU, or the tanh GELU as ggml evaluates
 * it through its f16 lookup table: 0 for g <= -10, g for g >= 10, else
 * f16(gelu(f16(g))), both roundings to nearest even. Shared by
 * gated_act.comp and the matmul's gated form.
 *
 * The GELU arithmetic is kept unfused in the CPU's order (precise), and
 * tanh is computed here rather than by the driver, whose tanh has no
 * precision guarantee (Mesa's loses all relative accuracy near 0): a Taylor
 * polynomial below 0.55, (1 - e^-2z) / (1 + e^-2z) above, a few ulp in all.
 * What remains of a difference from the CPU's tanhf can move the final f16
 * rounding by one half-ulp on rare inputs. */
#ifndef KK_ACT_GLSL
#define KK_ACT_GLSL

#include "common.glsl"

float tanh_f32(float z)
{
    float a = abs(z), t;
    if (a < 0.55) {
        /* tanh z = z + z^3 P(z^2): Taylor terms through z^19, whose
         * truncation is below 1e-9 relative here */
        float z2 = a * a;
        float p = -2.3912911424355248e-04;
        p = p * z2 + 5.90027440945586e-04;
        p = p * z2 - 1.4558343870513183e-03;
        p = p * z2 + 3.592128036572481e-03;
        p = p * z2 - 8.863235529902197e-03;
        p = p * z2 + 2.1869488536155203e-02;
        p = p * z2 - 5.396825396825397e-02;
        p = p * z2 + 1.3333333333333333e-01;
        p = p * z2 - 3.333333333333333e-01;
        t = a + a * z2 * p;
    } else if (a < 10.0) {
        float e = exp(-2.0 * a);
        t = (1.0 - e) / (1.0 + e);
    } else {
        t = 1.0;
    }
    return z < 0.0 ? -t : t;
}

float gelu(float g)
{
    if (g <= -10.0)
        return 0.0;
    if (g >= 10.0)
        return g;
    const float sqrt_2_over_pi = 0.79788456080286535587989211986876;
    precise float gh = kk_round_f16(g);
    precise float inner = sqrt_2_over_pi * gh * (1.0 + 0.044715 * gh * gh);
    precise float r = 0.5 * gh * (1.0 + tanh_f32(inner));
    return kk_round_f16(r);
}

/* act(g) * up. */
float kk_gated(float g, float up, bool use_gelu)
{
    precise float a = use_gelu ? gelu(g) : g / (1.0 + exp(-g));
    precise float r = a * up;
    return r;
}

#endif
