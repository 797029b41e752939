"""Deterministic synthetic corpora of paper abstracts, for scale tests and benchmarks.

``generate(n, out, seed)`` streams ``n`` JSONL records (``id``, ``title``, ``abstract``,
``year``, ``venue``, ``authors``) to a file in constant memory. Each abstract (150-300
words) is assembled from one research area's vocabulary (tasks, concepts, datasets,
metrics, baselines, challenges) through varied sentence templates: motivation, gap,
proposal with a coined method name, method details, optional theory, experiments with
numbers, conclusion. About a fifth borrow a second area ("graph transformers for
protein design"), so keyword and dense retrieval see overlapping, realistic topics.

The shipped seed abstracts are mixed in at fixed, evenly spread positions, without an
``id`` (so their ids are the content hash, as when the seeds are ingested directly, and
eval/qa.jsonl's gold ids stay valid) and with the title ingest would derive.

Synthetic record ``i`` depends only on ``(seed, i)``: the same seed gives the same bytes,
and ``record_at`` regenerates any line without reading the file. Method names are unique
per record, so no two synthetic abstracts (or their content hashes) coincide.

Usage: ``rag-papers synth N OUT.jsonl [--seed S]`` or ``python -m rag_papers.synth N OUT``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIN_WORDS = 150
MAX_WORDS = 300


@dataclass(frozen=True)
class Area:
    name: str
    field: str
    tasks: tuple[str, ...]
    concepts: tuple[str, ...]
    components: tuple[str, ...]
    challenges: tuple[str, ...]
    datasets: tuple[str, ...]
    metrics: tuple[str, ...]
    baselines: tuple[str, ...]
    applications: tuple[str, ...]
    venues: tuple[str, ...]
    stems: tuple[str, ...]


def _a(spec: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in spec.split("|") if s.strip())


_AREA_SPECS: list[dict[str, str]] = [
    dict(
        name="graphs",
        field="graph representation learning",
        tasks="node classification|link prediction|graph classification|community detection|graph generation|knowledge graph completion",
        concepts="message passing|graph transformers|spectral graph filters|positional encodings|graph rewiring|hierarchical graph pooling|heterophily|over-squashing",
        components="a learnable edge-gating mechanism|a multi-hop attention operator|a spectral positional encoding|a differentiable graph rewiring step|a virtual global node|a curvature-aware aggregation rule",
        challenges="over-smoothing in deep message-passing networks|poor performance on heterophilous graphs|over-squashing of long-range information|scaling to graphs with billions of edges|sensitivity to noisy or missing edges",
        datasets="Cora|Citeseer|PubMed|ogbn-arxiv|ogbn-products|ogbl-collab|ZINC|Peptides-func|Roman-empire|FB15k-237",
        metrics="accuracy|ROC-AUC|Hits@50|MRR|mean absolute error",
        baselines="GCN|GAT|GraphSAGE|GIN|GPS|APPNP",
        applications="social network analysis|fraud detection|citation recommendation|traffic networks|chip design",
        venues="NeurIPS|ICML|ICLR|KDD|LoG|WWW",
        stems="Graph|Hop|Node|Edge|Spectra|Mesh",
    ),
    dict(
        name="llm",
        field="large language models",
        tasks="instruction following|multi-step reasoning|long-context question answering|text summarization|machine translation|factual knowledge editing",
        concepts="chain-of-thought prompting|preference optimization|mixture of experts|retrieval augmentation|in-context learning|reward modeling|speculative decoding|tokenization",
        components="a learned verifier that scores intermediate steps|a lightweight routing network|a contrastive preference loss|a memory of retrieved passages|a self-consistency decoding scheme|a curriculum over reasoning depth",
        challenges="hallucinated facts in generated text|the quadratic cost of attention over long inputs|reward hacking during alignment|brittle reasoning on out-of-distribution problems|the high cost of human preference annotation",
        datasets="GSM8K|MATH|MMLU|HotpotQA|Natural Questions|TruthfulQA|AlpacaEval|LongBench|WMT22|XSum",
        metrics="exact match|accuracy|win rate|ROUGE-L|BLEU|perplexity",
        baselines="Llama-3-8B|Mistral-7B|GPT-4|DPO|PPO|Self-Refine",
        applications="conversational assistants|scientific writing|customer support|education|legal document review",
        venues="ACL|EMNLP|NAACL|ICLR|NeurIPS|COLM|TACL",
        stems="Lex|Prompt|Token|Reason|Chat|Verba",
    ),
    dict(
        name="vision",
        field="visual recognition",
        tasks="object detection|semantic segmentation|instance segmentation|image classification|pose estimation|visual tracking",
        concepts="vision transformers|self-supervised pretraining|masked image modeling|feature pyramids|open-vocabulary recognition|test-time adaptation|knowledge distillation",
        components="a deformable attention module|a query-based detection head|a multi-scale feature fusion block|a masked autoencoding objective|a prototype-based classifier|a boundary refinement branch",
        challenges="the scarcity of dense pixel-level annotations|poor generalization to unseen domains|detecting small and occluded objects|the long-tailed distribution of object categories|the computational cost of high-resolution inputs",
        datasets="ImageNet-1k|COCO|ADE20K|Cityscapes|Pascal VOC|LVIS|ImageNet-C|Objects365",
        metrics="top-1 accuracy|mAP|mIoU|AP50|PQ",
        baselines="ResNet-50|ViT-B/16|Swin-T|DETR|Mask R-CNN|ConvNeXt",
        applications="surveillance|retail analytics|augmented reality|industrial inspection|photo organization",
        venues="CVPR|ICCV|ECCV|NeurIPS|WACV|TPAMI",
        stems="Vis|Pix|Seg|Det|Focal|Lens",
    ),
    dict(
        name="rl",
        field="deep reinforcement learning",
        tasks="continuous control|offline reinforcement learning|multi-agent coordination|exploration in sparse-reward environments|model-based planning|goal-conditioned navigation",
        concepts="world models|policy gradients|value function estimation|conservative Q-learning|intrinsic motivation|hierarchical options|reward shaping|distributional critics",
        components="a learned latent dynamics model|an ensemble of pessimistic critics|a count-based exploration bonus|a hindsight relabeling strategy|a trust-region policy update|a transformer-based sequence policy",
        challenges="sample inefficiency in high-dimensional environments|distribution shift between the behaviour policy and the learned policy|sparse and delayed rewards|unstable value estimation with function approximation|credit assignment among many agents",
        datasets="D4RL|Atari 100k|MuJoCo|DeepMind Control Suite|Procgen|NetHack|SMAC|Meta-World",
        metrics="normalized return|success rate|human-normalized score|episodic return|sample efficiency",
        baselines="SAC|PPO|TD3|CQL|IQL|DreamerV3",
        applications="robot locomotion|game playing|resource allocation|autonomous navigation|recommendation",
        venues="NeurIPS|ICML|ICLR|AAMAS|CoRL|RLC",
        stems="Q|Policy|Dream|Plan|Reward|Agent",
    ),
    dict(
        name="optim",
        field="optimization for deep learning",
        tasks="training large neural networks|hyperparameter tuning|learning-rate scheduling|distributed data-parallel training|low-precision training|fine-tuning pretrained models",
        concepts="adaptive gradient methods|second-order preconditioning|sharpness-aware minimization|gradient clipping|weight decay|loss landscape geometry|learning-rate warmup|momentum",
        components="a Kronecker-factored preconditioner|a layer-wise adaptive step size|a sharpness penalty estimated from one extra gradient|a communication-efficient gradient compressor|a schedule-free averaging scheme|a spectral normalization of updates",
        challenges="training instabilities such as loss spikes|the memory overhead of optimizer states|poor generalization of large-batch training|sensitivity to the learning-rate schedule|slow convergence on ill-conditioned problems",
        datasets="ImageNet-1k|CIFAR-10|CIFAR-100|C4|OpenWebText|WikiText-103|GLUE",
        metrics="validation loss|test accuracy|wall-clock time to target|perplexity|throughput",
        baselines="Adam|AdamW|SGD with momentum|Shampoo|LAMB|Lion",
        applications="language model pretraining|computer vision|speech recognition|recommendation models",
        venues="ICML|NeurIPS|ICLR|AISTATS|COLT|JMLR",
        stems="Opt|Grad|Step|Flat|Moment|Precon",
    ),
    dict(
        name="generative",
        field="generative modeling",
        tasks="image synthesis|text-to-image generation|video generation|density estimation|image editing|3D shape generation",
        concepts="diffusion models|score matching|flow matching|normalizing flows|variational autoencoders|classifier-free guidance|consistency distillation|latent diffusion",
        components="a learned noise schedule|a few-step consistency sampler|a cross-attention conditioning module|a rectified flow objective|a latent space regularizer|a guidance term estimated from a small classifier",
        challenges="slow sampling that requires hundreds of network evaluations|mode collapse and limited sample diversity|poor alignment between prompts and generated images|memorization of training examples|the cost of training at high resolution",
        datasets="CIFAR-10|ImageNet 256x256|FFHQ|LSUN Bedroom|MS-COCO captions|ShapeNet|UCF-101|LAION-Aesthetics",
        metrics="FID|Inception Score|CLIP score|precision and recall|bits per dimension",
        baselines="DDPM|DDIM|Stable Diffusion|StyleGAN2|EDM|DiT",
        applications="content creation|data augmentation|drug design|image restoration|animation",
        venues="CVPR|NeurIPS|ICLR|ICML|SIGGRAPH|ECCV",
        stems="Diff|Flow|Gen|Noise|Score|Dream",
    ),
    dict(
        name="speech",
        field="speech processing",
        tasks="automatic speech recognition|speech synthesis|speaker verification|speech translation|voice conversion|keyword spotting",
        concepts="self-supervised speech representations|connectionist temporal classification|neural vocoders|streaming encoders|discrete speech units|prosody modeling",
        components="a streaming conformer encoder|a duration predictor|a discrete unit tokenizer|a multi-resolution spectrogram discriminator|a speaker embedding adapter|a chunk-wise attention mask",
        challenges="limited labeled data for low-resource languages|latency constraints of on-device recognition|robustness to background noise and reverberation|unnatural prosody in synthesized speech|accent and dialect variation",
        datasets="LibriSpeech|Common Voice|VoxCeleb2|LJSpeech|CoVoST 2|FLEURS|Switchboard|AISHELL-1",
        metrics="word error rate|mean opinion score|equal error rate|BLEU|real-time factor",
        baselines="wav2vec 2.0|HuBERT|Whisper|Conformer|VITS|HiFi-GAN",
        applications="voice assistants|captioning|call-center analytics|accessibility tools|language learning",
        venues="Interspeech|ICASSP|ACL|NeurIPS|TASLP",
        stems="Voice|Wav|Phone|Sono|Echo|Audi",
    ),
    dict(
        name="recsys",
        field="recommender systems",
        tasks="sequential recommendation|click-through rate prediction|cold-start recommendation|session-based recommendation|conversational recommendation|re-ranking",
        concepts="collaborative filtering|two-tower retrieval|contrastive user modeling|graph-based recommenders|popularity bias|counterfactual evaluation|embedding compression",
        components="a user-interest disentangling encoder|a hashing-based embedding table|a debiasing propensity estimator|a multi-interest extraction layer|a contrastive augmentation of interaction sequences|a lightweight cross-feature interaction module",
        challenges="data sparsity for new users and items|popularity bias that reinforces feedback loops|the memory footprint of large embedding tables|distribution shift in user preferences over time|the gap between offline metrics and online gains",
        datasets="MovieLens-1M|Amazon Books|Yelp|Criteo|Avazu|Gowalla|Steam|Taobao",
        metrics="NDCG@10|Recall@20|AUC|log loss|hit rate",
        baselines="SASRec|BERT4Rec|LightGCN|DeepFM|DCN-v2|GRU4Rec",
        applications="e-commerce|music streaming|news feeds|online advertising|video platforms",
        venues="RecSys|KDD|SIGIR|WWW|WSDM|CIKM",
        stems="Rec|Click|Pref|Taste|Item|Rank",
    ),
    dict(
        name="federated",
        field="federated and privacy-preserving learning",
        tasks="federated learning|differentially private training|secure aggregation|personalized federated learning|membership inference defense|machine unlearning",
        concepts="differential privacy|client drift|secure multi-party computation|gradient inversion attacks|privacy accounting|model personalization|data heterogeneity",
        components="a drift-correcting control variate|a per-client adapter|an adaptive clipping rule for private gradients|a sparse update compression scheme|a Rényi privacy accountant|a server-side momentum",
        challenges="statistical heterogeneity across clients|the accuracy cost of strong privacy guarantees|communication bottlenecks on mobile devices|leakage of training data through shared gradients|unreliable and partially participating clients",
        datasets="FEMNIST|Shakespeare|CIFAR-10 with Dirichlet splits|StackOverflow|Sent140|FedISIC|MIMIC-III",
        metrics="test accuracy|privacy budget epsilon|communication rounds|attack success rate|bytes transmitted",
        baselines="FedAvg|FedProx|SCAFFOLD|DP-SGD|FedBN|Ditto",
        applications="mobile keyboards|healthcare|finance|smart homes|cross-silo collaboration",
        venues="ICML|NeurIPS|ICLR|USENIX Security|CCS|AISTATS",
        stems="Fed|Priv|Shield|Silo|Crowd|Local",
    ),
    dict(
        name="robustness",
        field="adversarial robustness",
        tasks="adversarial defense|certified robustness|out-of-distribution detection|backdoor detection|robust fine-tuning|uncertainty calibration",
        concepts="adversarial training|randomized smoothing|Lipschitz networks|distribution shift|spurious correlations|data poisoning|conformal prediction",
        components="a margin-aware adversarial loss|a certified Lipschitz layer|an energy-based detection score|a trigger reconstruction procedure|a worst-group reweighting scheme|a calibration head trained on held-out data",
        challenges="the trade-off between robustness and clean accuracy|the high cost of generating adversarial examples|overconfident predictions on unfamiliar inputs|hidden backdoors planted in training data|reliance on spurious features",
        datasets="CIFAR-10|ImageNet|WILDS|Waterbirds|CelebA|ImageNet-R|ImageNet-Sketch|CIFAR-10-C",
        metrics="robust accuracy|certified accuracy|AUROC|FPR@95|expected calibration error",
        baselines="PGD adversarial training|TRADES|randomized smoothing|ODIN|Group DRO|Deep Ensembles",
        applications="autonomous vehicles|medical diagnosis|content moderation|biometric authentication|finance",
        venues="ICML|NeurIPS|ICLR|CVPR|IEEE S&P|SaTML",
        stems="Robust|Guard|Armor|Certi|Safe|Sentinel",
    ),
    dict(
        name="timeseries",
        field="time-series analysis",
        tasks="long-horizon forecasting|anomaly detection in time series|time-series classification|missing value imputation|probabilistic forecasting|change-point detection",
        concepts="patch-based transformers|state-space models|seasonal-trend decomposition|frequency-domain representations|channel independence|foundation models for time series",
        components="a learnable seasonal-trend decomposition|a frequency-enhanced attention layer|a channel-mixing MLP|a reversible instance normalization|a quantile output head|a structured state-space kernel",
        challenges="non-stationarity and distribution shift over time|error accumulation over long horizons|irregular sampling and missing observations|the lack of large pretraining corpora for time series|interactions among many correlated channels",
        datasets="ETTh1|ETTm2|Electricity|Traffic|Weather|M4|UCR archive|SMD",
        metrics="MSE|MAE|CRPS|F1 score|sMAPE",
        baselines="PatchTST|Informer|Autoformer|DLinear|N-BEATS|TimesNet",
        applications="energy demand planning|predictive maintenance|financial markets|epidemiology|supply chains",
        venues="NeurIPS|ICML|ICLR|KDD|AAAI|IJCAI",
        stems="Chrono|Temporal|Season|Trend|Horizon|Tick",
    ),
    dict(
        name="molecules",
        field="machine learning for molecules",
        tasks="molecular property prediction|protein structure prediction|de novo drug design|retrosynthesis planning|protein-ligand docking|protein design",
        concepts="equivariant neural networks|geometric deep learning|molecular graph generation|protein language models|binding affinity prediction|conformer generation",
        components="an SE(3)-equivariant message-passing layer|a fragment-based generative decoder|a pretrained protein language model encoder|a torsional diffusion process|a reaction template scorer|a pocket-conditioned generator",
        challenges="the scarcity of experimentally measured labels|generalization to novel molecular scaffolds|synthesizability of generated molecules|modeling flexible three-dimensional conformations|the cost of physics-based simulation",
        datasets="QM9|MoleculeNet|PDBbind|CASP15|ZINC250k|USPTO-50k|GEOM-Drugs|CATH",
        metrics="MAE|RMSD|docking success rate|top-10 accuracy|validity and novelty",
        baselines="SchNet|DimeNet++|AlphaFold2|ESM-2|DiffDock|EGNN",
        applications="drug discovery|materials science|enzyme engineering|vaccine design|agrochemistry",
        venues="NeurIPS|ICML|ICLR|Nature Machine Intelligence|Bioinformatics|RECOMB",
        stems="Mol|Chem|Prot|Fold|Bond|Atom",
    ),
    dict(
        name="robotics",
        field="robot learning",
        tasks="robotic manipulation|legged locomotion|imitation learning from demonstrations|sim-to-real transfer|grasp planning|mobile navigation",
        concepts="diffusion policies|domain randomization|visuomotor control|tactile sensing|behaviour cloning|language-conditioned policies|motion planning",
        components="a keypoint-based visual representation|a diffusion-based action head|a tactile feedback encoder|an action-chunking transformer|a residual policy on top of a classical controller|a domain-randomized simulator",
        challenges="the cost of collecting real-world demonstrations|the gap between simulation and reality|compounding errors in long-horizon tasks|contact-rich interactions with deformable objects|safety during exploration on hardware",
        datasets="RoboMimic|Meta-World|RLBench|CALVIN|Open X-Embodiment|LIBERO|BridgeData V2",
        metrics="success rate|task completion time|tracking error|collision rate|average return",
        baselines="BC-RNN|Diffusion Policy|ACT|RT-1|R3M|OpenVLA",
        applications="household assistance|warehouse automation|surgery|agriculture|assembly lines",
        venues="CoRL|ICRA|IROS|RSS|RA-L|NeurIPS",
        stems="Robo|Grasp|Motor|Arm|Tact|Servo",
    ),
    dict(
        name="medical",
        field="medical image analysis",
        tasks="lesion segmentation|disease classification from radiographs|medical report generation|image registration|survival prediction|whole-slide image analysis",
        concepts="multiple instance learning|foundation models for radiology|semi-supervised segmentation|uncertainty estimation|domain adaptation across scanners|weak supervision from reports",
        components="an anatomy-aware attention module|a multiple-instance pooling operator|a cross-scanner normalization layer|a report-guided contrastive objective|a topology-preserving loss|a shape prior learned from atlases",
        challenges="the expense of expert annotations|variability across hospitals and scanners|class imbalance of rare pathologies|the need for calibrated and interpretable predictions|gigapixel image sizes",
        datasets="CheXpert|MIMIC-CXR|BraTS|LIDC-IDRI|Camelyon16|ISIC 2019|KiTS19|ACDC",
        metrics="Dice score|AUC|Hausdorff distance|C-index|sensitivity at fixed specificity",
        baselines="U-Net|nnU-Net|TransUNet|CLAM|MedSAM|CheXNet",
        applications="radiology|digital pathology|dermatology|cardiology|oncology",
        venues="MICCAI|MIDL|IPMI|Medical Image Analysis|IEEE TMI|CVPR",
        stems="Med|Radi|Patho|Scan|Lesion|Cardi",
    ),
    dict(
        name="ir",
        field="information retrieval",
        tasks="dense passage retrieval|neural re-ranking|query expansion|retrieval-augmented generation|conversational search|cross-lingual retrieval",
        concepts="dual encoders|late interaction|learned sparse representations|hard negative mining|query rewriting|approximate nearest neighbour search|relevance feedback",
        components="a late-interaction scoring function|a learned sparse lexical expansion|a hard-negative curriculum|an LLM-based query rewriter|a product-quantized index|a listwise distillation objective",
        challenges="the vocabulary mismatch between queries and documents|the latency of cross-encoder re-ranking|generalization to new domains without labels|the memory cost of multi-vector indexes|evaluating retrieval for generation",
        datasets="MS MARCO|BEIR|TREC Deep Learning 2019|Natural Questions|MIRACL|LoTTE|HotpotQA",
        metrics="MRR@10|nDCG@10|Recall@100|latency per query|index size",
        baselines="BM25|DPR|ColBERTv2|SPLADE|monoT5|Contriever",
        applications="web search|enterprise search|question answering|legal discovery|e-commerce search",
        venues="SIGIR|ECIR|CIKM|WSDM|ACL|EMNLP",
        stems="Retri|Query|Index|Seek|Pass|Doc",
    ),
    dict(
        name="theory",
        field="learning theory",
        tasks="multi-armed bandits|online convex optimization|PAC learning|generalization analysis of neural networks|reinforcement learning theory|statistical estimation",
        concepts="regret bounds|sample complexity|implicit bias of gradient descent|neural tangent kernels|uniform convergence|lower bounds|benign overfitting",
        components="an optimistic confidence-bound rule|a doubling trick over unknown horizons|a refined concentration inequality|a mirror-descent update|a kernel regime analysis|a data-dependent complexity measure",
        challenges="the gap between worst-case theory and practice|unknown or delayed feedback|heavy-tailed noise|non-convex objectives|high-dimensional parameter spaces",
        datasets="synthetic instances|linear bandit benchmarks|MNIST|CIFAR-10|simulated environments",
        metrics="cumulative regret|sample complexity|excess risk|generalization gap|convergence rate",
        baselines="UCB|Thompson sampling|EXP3|online gradient descent|ERM",
        applications="clinical trials|online advertising|adaptive experimentation|pricing|routing",
        venues="COLT|ALT|NeurIPS|ICML|JMLR|AISTATS",
        stems="Regret|Bound|Bandit|Lip|Kern|Conv",
    ),
    dict(
        name="efficiency",
        field="efficient deep learning",
        tasks="model compression|post-training quantization|structured pruning|efficient inference on edge devices|neural architecture search|parameter-efficient fine-tuning",
        concepts="low-rank adaptation|mixed-precision quantization|knowledge distillation|sparsity|early exiting|token merging|KV-cache compression",
        components="an outlier-aware quantization scale|a low-rank adapter placed in every attention block|a learned token-merging schedule|a hardware-aware latency predictor|a second-order pruning criterion|an early-exit classifier",
        challenges="accuracy loss at very low bit widths|the memory bandwidth bottleneck of autoregressive decoding|the cost of retraining compressed models|hardware-specific speedups that do not transfer|outlier activations in large transformers",
        datasets="ImageNet-1k|GLUE|WikiText-2|C4|SQuAD|MMLU|COCO",
        metrics="accuracy|perplexity|latency|memory footprint|energy per inference",
        baselines="GPTQ|AWQ|LoRA|SparseGPT|DistilBERT|MobileNetV3",
        applications="mobile phones|embedded systems|serving at scale|wearables|autonomous drones",
        venues="MLSys|ICML|NeurIPS|ICLR|DAC|EMNLP",
        stems="Tiny|Quant|Lite|Sparse|Prune|Swift",
    ),
    dict(
        name="causal",
        field="causal inference",
        tasks="treatment effect estimation|causal discovery|counterfactual prediction|off-policy evaluation|instrumental variable estimation|causal representation learning",
        concepts="structural causal models|propensity scores|doubly robust estimation|unobserved confounding|identifiability|invariant prediction",
        components="a balancing representation regularizer|a differentiable acyclicity constraint|a doubly robust pseudo-outcome|a sensitivity model for hidden confounders|an interventional data augmentation|a neural instrumental variable stage",
        challenges="hidden confounding in observational data|limited overlap between treated and control groups|identifiability of latent causal variables|the combinatorial search space of causal graphs|heterogeneous effects across subpopulations",
        datasets="IHDP|Jobs|Twins|ACIC 2016|Sachs|synthetic structural causal models",
        metrics="PEHE|ATE error|structural Hamming distance|policy value|coverage",
        baselines="TARNet|CFR|causal forests|NOTEARS|PC algorithm|DragonNet",
        applications="healthcare policy|economics|marketing|education|epidemiology",
        venues="NeurIPS|ICML|UAI|CLeaR|AISTATS|JMLR",
        stems="Cause|Counter|Inter|Confound|Effect|Struct",
    ),
    dict(
        name="multimodal",
        field="vision-language learning",
        tasks="visual question answering|image captioning|image-text retrieval|referring expression grounding|video question answering|document understanding",
        concepts="contrastive image-text pretraining|multimodal large language models|visual instruction tuning|cross-modal alignment|visual grounding|interleaved image-text data",
        components="a query transformer that compresses visual tokens|a region-level contrastive loss|a visual instruction dataset built automatically|a cross-modal fusion encoder|a high-resolution tiling strategy|a grounding head over image patches",
        challenges="object hallucination in generated descriptions|the cost of aligning vision and language at scale|weak fine-grained spatial reasoning|compositional generalization|noisy web-scale image-text pairs",
        datasets="VQAv2|COCO Captions|Flickr30k|GQA|TextVQA|RefCOCO|DocVQA|MMBench",
        metrics="VQA accuracy|CIDEr|Recall@1|grounding accuracy|ANLS",
        baselines="CLIP|BLIP-2|LLaVA-1.5|Flamingo|ALIGN|InstructBLIP",
        applications="assistive technology|e-commerce search|robotics|education|content moderation",
        venues="CVPR|ICCV|NeurIPS|ACL|ECCV|ICLR",
        stems="Vista|Caption|Lingo|Sight|Clip|Frame",
    ),
    dict(
        name="driving",
        field="3D perception for autonomous driving",
        tasks="3D object detection|LiDAR point cloud segmentation|motion forecasting|bird's-eye-view mapping|multi-object tracking|occupancy prediction",
        concepts="bird's-eye-view representations|multi-sensor fusion|point cloud transformers|temporal fusion|occupancy networks|trajectory prediction",
        components="a depth-aware view transformer|a sparse voxel backbone|a temporal memory of past frames|a camera-LiDAR fusion module|a goal-conditioned trajectory decoder|an occupancy flow head",
        challenges="the sparsity of LiDAR returns at long range|adverse weather and lighting|the multimodality of future trajectories|calibration errors between sensors|real-time constraints on vehicle hardware",
        datasets="nuScenes|Waymo Open Dataset|KITTI|Argoverse 2|SemanticKITTI|Lyft Level 5",
        metrics="mAP|NDS|minADE|mIoU|AMOTA",
        baselines="PointPillars|CenterPoint|BEVFusion|BEVFormer|VoxelNet|Wayformer",
        applications="autonomous vehicles|delivery robots|traffic monitoring|mapping|drones",
        venues="CVPR|ICCV|ECCV|CoRL|ICRA|IROS",
        stems="Lidar|BEV|Voxel|Drive|Point|Radar",
    ),
    dict(
        name="fairness",
        field="trustworthy machine learning",
        tasks="fair classification|model explanation|feature attribution|bias auditing|concept-based interpretability|algorithmic recourse",
        concepts="group fairness constraints|Shapley values|mechanistic interpretability|counterfactual explanations|sparse autoencoders|demographic parity",
        components="a fairness-constrained training objective|a fast Shapley value estimator|a sparse dictionary of learned features|a counterfactual generator with plausibility constraints|a concept bottleneck layer|a post-hoc auditing test",
        challenges="the unreliability of post-hoc explanations|conflicting definitions of fairness|the cost of exact attribution methods|missing sensitive attributes|explanations that do not reflect model internals",
        datasets="Adult|COMPAS|German Credit|CelebA|CUB-200|Civil Comments|BBQ",
        metrics="demographic parity gap|equalized odds|faithfulness|deletion AUC|accuracy",
        baselines="SHAP|LIME|Integrated Gradients|reweighing|adversarial debiasing|concept bottleneck models",
        applications="lending|hiring|criminal justice|healthcare|content recommendation",
        venues="FAccT|NeurIPS|ICML|ICLR|AIES|AAAI",
        stems="Fair|Explain|Trust|Audit|Attr|Probe",
    ),
    dict(
        name="sciml",
        field="scientific machine learning",
        tasks="solving partial differential equations|weather forecasting|fluid dynamics simulation|inverse problems|surrogate modeling|climate emulation",
        concepts="neural operators|physics-informed neural networks|graph-based simulators|spectral methods|symmetry constraints|uncertainty quantification",
        components="a Fourier neural operator layer|a physics-informed residual loss|a mesh-based message-passing simulator|a multi-resolution latent space|a conservation-law projection|an autoregressive rollout with noise injection",
        challenges="error accumulation in long autoregressive rollouts|the cost of high-fidelity numerical solvers|generalization to unseen boundary conditions|enforcing physical conservation laws|scarce and noisy observations",
        datasets="PDEBench|ERA5|WeatherBench 2|Navier-Stokes benchmarks|Darcy flow|AirfRANS",
        metrics="relative L2 error|RMSE|anomaly correlation coefficient|speedup over the numerical solver|energy conservation error",
        baselines="FNO|DeepONet|PINN|MeshGraphNet|GraphCast|U-Net",
        applications="weather prediction|aerodynamic design|seismic imaging|climate science|nuclear fusion",
        venues="NeurIPS|ICML|ICLR|Journal of Computational Physics|SIAM|Nature",
        stems="Phys|Flux|Wave|Field|Operator|Stream",
    ),
    dict(
        name="continual",
        field="continual and meta-learning",
        tasks="class-incremental learning|few-shot classification|domain-incremental learning|test-time training|task-agnostic continual learning|meta-reinforcement learning",
        concepts="catastrophic forgetting|experience replay|prompt-based continual learning|gradient-based meta-learning|parameter isolation|stability-plasticity trade-off",
        components="a compact generative replay buffer|a set of task-specific prompts|a gradient projection onto past-task subspaces|a meta-learned initialization|a drift-compensating classifier|a plasticity-restoring reset rule",
        challenges="catastrophic forgetting of earlier tasks|loss of plasticity after long training|memory limits on stored exemplars|unknown task boundaries|few labeled examples per class",
        datasets="Split CIFAR-100|CORe50|ImageNet-R|miniImageNet|tieredImageNet|Omniglot|CLEAR",
        metrics="average accuracy|forgetting|backward transfer|5-way 1-shot accuracy|forward transfer",
        baselines="EWC|iCaRL|DER++|L2P|MAML|ProtoNet",
        applications="lifelong robots|personal assistants|streaming data|edge devices|medical monitoring",
        venues="NeurIPS|ICML|ICLR|CVPR|CoLLAs|TMLR",
        stems="Cont|Meta|Recall|Adapt|Life|Replay",
    ),
    dict(
        name="code",
        field="code generation and program synthesis",
        tasks="code generation from natural language|program repair|code search|test generation|program synthesis from examples|formal theorem proving",
        concepts="code language models|execution feedback|repository-level context|unit-test-driven decoding|neural-symbolic search|formal verification",
        components="an execution-guided reranker|a retrieval module over repository files|a self-debugging loop with compiler feedback|a tree-structured decoder|a learned tactic predictor|a test-case generator",
        challenges="functional incorrectness of generated code|limited context for large repositories|the cost of executing candidate programs|sparse reward signals for correctness|hallucinated APIs",
        datasets="HumanEval|MBPP|SWE-bench|CodeSearchNet|APPS|Defects4J|miniF2F|LiveCodeBench",
        metrics="pass@1|pass@10|exact match|resolved rate|CodeBLEU",
        baselines="Codex|CodeLlama|StarCoder|AlphaCode|Reflexion|DeepSeek-Coder",
        applications="software engineering|education|data analysis|security auditing|mathematics",
        venues="ICSE|FSE|NeurIPS|ICLR|PLDI|ACL",
        stems="Code|Synth|Prog|Lambda|Patch|Proof",
    ),
    dict(
        name="remote",
        field="remote sensing and earth observation",
        tasks="land-cover classification|change detection|crop yield prediction|building footprint extraction|cloud removal|flood mapping",
        concepts="multispectral imagery|synthetic aperture radar|self-supervised pretraining on satellite data|spatio-temporal modeling|geospatial foundation models|super-resolution",
        components="a spectral-temporal transformer|a SAR-optical fusion branch|a masked pretraining objective over image time series|a change-aware siamese encoder|a geographic positional encoding|a cloud mask predictor",
        challenges="cloud cover that hides the surface|the scarcity of labels in many regions|differences between sensors and resolutions|seasonal variation|the huge volume of satellite imagery",
        datasets="BigEarthNet|EuroSAT|SpaceNet|xView2|Sen1Floods11|fMoW|LEVIR-CD",
        metrics="overall accuracy|F1 score|mIoU|kappa|RMSE",
        baselines="SatMAE|Prithvi|U-Net|SeCo|DeepLabv3+|ResNet-50",
        applications="agriculture|disaster response|urban planning|deforestation monitoring|climate research",
        venues="IGARSS|CVPR Workshops|IEEE TGRS|NeurIPS|Remote Sensing of Environment",
        stems="Geo|Terra|Sat|Orbit|Land|Strata",
    ),
]

AREAS: tuple[Area, ...] = tuple(
    Area(**{k: (v if k in ("name", "field") else _a(v)) for k, v in spec.items()})  # type: ignore[arg-type]
    for spec in _AREA_SPECS
)

ADJECTIVES = _a(
    "simple|scalable|principled|lightweight|unified|robust|data-efficient|modular|general-purpose|training-free|provably efficient|plug-and-play|parameter-efficient|fully differentiable"
)
KINDS = _a(
    "framework|architecture|training objective|algorithm|method|inference procedure|learning paradigm|pretraining strategy"
)
SUFFIXES = _a("Net|Former|Mix|Flow|GPT|Diff|Fuse|Bench|Lite|Align|Prompt|Stack|Fusion|Sparse|Tune|Graph")
PREFIXES = _a(
    "Meta|Hyper|Omni|Neo|Dyna|Proto|Poly|Uni|Multi|Auto|Deep|Fast|Pro|Co|Trans|Equi|Cross|Self|Micro|Nano|Ultra|Mono|Bi|Tri"
)
STEMS: tuple[str, ...] = tuple(sorted({s for a in AREAS for s in a.stems}))
VERSIONS = ("", "", "", "++", "-2", "-X", "-L", "v2", "-Zero", "-S", "+", "-R")
FIRST_NAMES = _a(
    "Wei|Anna|Mohammed|Sofia|Hiroshi|Lucas|Priya|Chen|Olga|Daniel|Fatima|Jonas|Mei|Carlos|Aisha|Luca|Yuki|Emma|Ravi|Nina|Omar|Elena|Kwame|Sara|Tomasz|Ines|Jin|Marta|Arjun|Leila|Pedro|Hana|Ivan|Chloe|Kenji|Amara|Felix|Zhang|Noor|Mateo"
)
LAST_NAMES = _a(
    "Wang|Müller|Garcia|Kim|Nguyen|Rossi|Patel|Ivanova|Smith|Tanaka|Okafor|Dubois|Li|Kowalski|Silva|Haddad|Chen|Jensen|Novak|Fernandez|Singh|Schmidt|Cohen|Yamamoto|Mensah|Larsen|Zhao|Moreau|Kumar|Andersson|Rahman|Costa|Ali|Becker|Park|Horvat|Liu|Santos|Bianchi|O'Brien"
)
COST_METRICS = _a(
    "inference latency|memory usage|training time|parameter count|communication cost|labeling cost|energy consumption"
)
THEORY_CLAIMS = _a(
    "converges to a stationary point|is consistent|achieves a near-optimal rate|recovers the ground-truth structure|is minimax optimal up to logarithmic factors|enjoys a tighter generalization bound than prior analyses|is invariant to the relevant symmetry group"
)
CONDITIONS = _a(
    "mild assumptions|standard smoothness assumptions|a bounded-noise condition|realizability|a margin condition|sub-Gaussian noise"
)
RATES = _a(
    r"O(1/\sqrt{T})|O(\log T)|O(d/\epsilon^2)|the square root of the horizon|logarithmically with the number of samples|linearly with the dimension"
)


def _pick(rng: random.Random, items: tuple[str, ...]) -> str:
    return items[rng.randrange(len(items))]


def _article(phrase: str) -> str:
    return (
        f"an {phrase}"
        if phrase[:1].lower() in "aeiou" and not phrase.lower().startswith(("uni", "eu", "one"))
        else f"a {phrase}"
    )


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


_SMALL = frozenset(
    [
        "a",
        "an",
        "and",
        "as",
        "at",
        "by",
        "for",
        "from",
        "in",
        "of",
        "on",
        "or",
        "the",
        "to",
        "via",
        "with",
        "without",
        "under",
        "over",
    ]
)


def _title(s: str) -> str:
    """Title case that leaves acronyms, names and small words alone."""
    words = s.split(" ")
    return " ".join(
        w if (i and w in _SMALL) or not w[:1].islower() else w[:1].upper() + w[1:] for i, w in enumerate(words)
    )


def method_name(i: int, rng: random.Random) -> str:
    """Unique per ``i``: a coined name whose look varies, with ``i`` encoded in its parts."""
    stems = STEMS
    n_p, n_s, n_x = len(PREFIXES), len(stems), len(SUFFIXES)
    j = (i * 7919 + 104729) % (n_p * n_s * n_x)  # spread neighbours apart; a bijection on the block
    block = i // (n_p * n_s * n_x)
    p, rest = divmod(j, n_s * n_x)
    s, x = divmod(rest, n_x)
    style = rng.randrange(4)
    if style == 0:
        name = f"{PREFIXES[p]}{stems[s]}{SUFFIXES[x]}"
    elif style == 1:
        name = f"{stems[s]}{SUFFIXES[x]}-{PREFIXES[p]}"
    elif style == 2:
        name = f"{PREFIXES[p]}-{stems[s]}{SUFFIXES[x]}"
    else:
        name = f"{stems[s]}{PREFIXES[p].lower()}{SUFFIXES[x]}"
    return name + (str(block + 1) if block else "")


def _authors(rng: random.Random) -> list[str]:
    return [f"{_pick(rng, FIRST_NAMES)} {_pick(rng, LAST_NAMES)}" for _ in range(rng.randint(2, 7))]


def _year(rng: random.Random) -> int:
    years = list(range(2012, 2027))
    return rng.choices(years, weights=[1 + (y - 2012) ** 2 for y in years])[0]


def _pct(rng: random.Random) -> str:
    return f"{rng.uniform(0.4, 14.0):.1f}%"


def synth_record(i: int, seed: int = 0) -> dict[str, Any]:
    """Synthetic record number ``i`` (independent of every other record)."""
    rng = random.Random(f"rag-papers-synth:{seed}:{i}")
    area = AREAS[rng.randrange(len(AREAS))]
    other = AREAS[rng.randrange(len(AREAS))] if rng.random() < 0.2 else None
    name = method_name(i, rng) + rng.choice(VERSIONS)
    task, task2 = rng.sample(area.tasks, 2)
    concept, concept2 = rng.sample(area.concepts, 2)
    comp, comp2, comp3 = rng.sample(area.components, 3)
    challenge = _pick(rng, area.challenges)
    ds = rng.sample(area.datasets, min(len(area.datasets), rng.randint(2, 4)))
    metric = _pick(rng, area.metrics)
    baseline, baseline2 = rng.sample(area.baselines, 2)
    app, app2 = rng.sample(area.applications, 2)
    adj = _pick(rng, ADJECTIVES)
    kind = _pick(rng, KINDS)
    field = area.field
    if other is not None and other is not area:  # cross-area work: borrow the other area's idea
        concept2 = _pick(rng, other.concepts)
        comp3 = _pick(rng, other.components)
    ds_list = ", ".join(ds[:-1]) + f" and {ds[-1]}" if len(ds) > 1 else ds[0]

    opening = _pick(
        rng,
        (
            f"{_cap(task)} is a fundamental problem in {field}, with applications ranging from {app} to {app2}.",
            f"Recent progress in {field} has led to strong results on {task}, yet {challenge} remains a major obstacle.",
            f"{_cap(concept)} has become a central tool for {task} and {task2}.",
            f"Many practical systems for {app} rely on {task}, where {concept} is now the dominant paradigm.",
            f"Despite rapid advances in {field}, {task} under realistic conditions is still far from solved.",
        ),
    )
    gap = _pick(
        rng,
        (
            f"However, existing approaches suffer from {challenge}, which limits their use in {app}.",
            f"Prior work such as {baseline} and {baseline2} addresses this only partially and at the cost of increased {_pick(rng, COST_METRICS)}.",
            f"A key limitation of current methods is {challenge}.",
            f"Most existing methods build on {concept2}, but they typically ignore {challenge}.",
            f"In practice, {challenge} makes standard pipelines brittle and expensive.",
        ),
    )
    proposal = _pick(
        rng,
        (
            f"In this paper, we propose {name}, {_article(adj + ' ' + kind)} for {task} based on {concept}.",
            f"We introduce {name}, which combines {concept} with {comp} to address this issue.",
            f"To address this, we present {name}, {_article(adj)} yet effective {kind} built on {concept}.",
            f"This work introduces {name}, {_article(kind)} that revisits {concept} from the perspective of {concept2}.",
            f"We propose {name}, {_article(adj + ' ' + kind)} that makes {concept} practical for {task}.",
        ),
    )
    details = [
        f"The key idea is to use {comp} so that the model can exploit {concept2} without additional supervision.",
        f"{name} couples {comp} with {comp2}, allowing information to flow between both components during training.",
        f"Concretely, we introduce {comp2} and train it jointly with the main model using a {_pick(rng, ('contrastive', 'regularized', 'multi-task', 'self-supervised', 'variational', 'ranking'))} objective.",
        f"Unlike {baseline}, our approach does not require {_pick(rng, ('additional labels', 'task-specific tuning', 'expensive pretraining', 'access to the full dataset', 'hand-crafted features', 'a separate teacher model'))}.",
        f"We further incorporate {comp3}, which reduces {_pick(rng, COST_METRICS)} with little loss in quality.",
        f"The resulting {kind} is compatible with existing {task} pipelines and adds only a small overhead.",
        f"We also analyse how {concept2} interacts with {concept} and identify when the two are complementary.",
    ]
    rng.shuffle(details)
    theory = [
        f"Theoretically, we show that {name} {_pick(rng, THEORY_CLAIMS)} under {_pick(rng, CONDITIONS)}.",
        f"We further prove a bound showing that the error scales as {_pick(rng, RATES)}.",
    ]
    experiments = _pick(
        rng,
        (
            f"We evaluate {name} on {ds_list}.",
            f"Extensive experiments on {ds_list} demonstrate that {name} consistently outperforms {baseline} and other strong baselines.",
            f"We conduct experiments on {len(ds)} benchmarks ({ds_list}) covering both {task} and {task2}.",
        ),
    )
    results = [
        f"{name} improves {metric} by {_pct(rng)} over the strongest baseline while reducing {_pick(rng, COST_METRICS)} by {rng.uniform(1.3, 9.0):.1f}x.",
        f"On {ds[0]}, it reaches {rng.uniform(40, 98):.1f} {metric}, a new state of the art among methods of comparable size.",
        f"Ablation studies confirm that {comp2} accounts for most of the gain.",
        f"The improvements are largest in the low-data regime, where {name} matches {baseline2} with only {rng.choice((5, 10, 20, 25))}% of the training data.",
        "Our analysis further shows that the gains persist across model scales and random seeds.",
    ]
    rng.shuffle(results)
    closing = _pick(
        rng,
        (
            f"Our results suggest that {concept} is a promising direction for {task}.",
            f"These findings highlight the importance of addressing {challenge} when designing systems for {app}.",
            "Code and pretrained models will be made publicly available.",
            f"We believe {name} provides a practical foundation for future work on {task2}.",
        ),
    )

    target = rng.randint(MIN_WORDS + 10, MAX_WORDS - 10)
    head = [opening, gap, proposal, details[0]]
    optional = details[1:] + (theory[: rng.randint(1, 2)] if rng.random() < 0.35 else [])
    tail = [experiments, results[0]]
    extra_results = results[1:]

    def words(parts: list[str]) -> int:
        return sum(len(p.split()) for p in parts)

    body = head[:]
    for s in optional:
        if words(body + tail + [closing]) >= target:
            break
        body.append(s)
    tail_all = tail[:]
    for s in extra_results:
        if words(body + tail_all + [closing]) >= target:
            break
        tail_all.append(s)
    sentences = body + tail_all + [closing]
    while words(sentences) > MAX_WORDS and len(sentences) > 6:
        sentences.pop(-2)  # drop the last result sentence first, keep the conclusion
    abstract = " ".join(sentences)

    title = _title(
        _pick(
            rng,
            (
                f"{name}: {adj} {task} via {concept}",
                f"{name}: Towards {task} with {concept}",
                f"{name}: {concept} Meets {concept2} for {task}",
                f"{concept} for {task}: The {name} Approach",
                f"Rethinking {concept} for {task} with {name}",
                f"{name}: Tackling {challenge.split(' such as ')[0]}",
                f"{name}: {adj} {kind} for {task} in {app}",
            ),
        )
    )
    return {
        "id": f"synth-{seed}-{i}",
        "title": title,
        "abstract": abstract,
        "year": _year(rng),
        "venue": _pick(rng, area.venues),
        "authors": _authors(rng),
    }


# ------------------------------------------------------------------ seeds and corpus
def seed_records(seeds_dir: Path | None = None) -> list[dict[str, Any]]:
    """The shipped seed abstracts as JSONL records: no id (content hash), the title ingest derives."""
    from rag_papers.corpus import derive_title, expand_paths, read_file
    from rag_papers.paths import seeds_dir as shipped_seeds

    folder = seeds_dir or shipped_seeds()
    out = []
    for path in expand_paths([folder]):
        for rec in read_file(path):
            row: dict[str, Any] = {"title": derive_title(rec.abstract), "abstract": rec.abstract}
            if rec.year is not None:
                row["year"] = rec.year
            if rec.venue:
                row["venue"] = rec.venue
            out.append(row)
    return out


def seed_positions(n: int, n_seeds: int) -> dict[int, int]:
    """Line index -> seed index: seeds spread evenly over the ``n`` lines."""
    k = min(n, n_seeds)
    return {(j * n) // k + (n // k) // 2 if n > k else j: j for j in range(k)}


def iter_records(n: int, seed: int = 0, seeds: list[dict[str, Any]] | None = None) -> Iterator[dict[str, Any]]:
    """``n`` records: the seed abstracts at fixed positions, synthetic ones everywhere else."""
    seeds = seed_records() if seeds is None else seeds
    where = seed_positions(n, len(seeds))
    synth_i = 0
    for line in range(n):
        if line in where:
            yield seeds[where[line]]
        else:
            yield synth_record(synth_i, seed)
            synth_i += 1


def record_at(line: int, n: int, seed: int = 0, seeds: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The record on line ``line`` (0-based) of the ``n``-line corpus, without generating the others."""
    seeds = seed_records() if seeds is None else seeds
    where = seed_positions(n, len(seeds))
    if line in where:
        return seeds[where[line]]
    return synth_record(line - sum(1 for pos in where if pos < line), seed)


def generate(n: int, out: Path, seed: int = 0, include_seeds: bool = True) -> int:
    """Stream ``n`` records to ``out`` (JSONL, UTF-8), atomically; returns the number written."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    count = 0
    try:
        with tmp.open("w", encoding="utf-8", newline="\n") as fh:
            for rec in iter_records(n, seed, None if include_seeds else []):
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
                count += 1
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return count


def sample_queries(n: int, seed: int = 0) -> list[str]:
    """``n`` search queries about the generated topics (what a user of such a corpus would ask)."""
    rng = random.Random(f"rag-papers-queries:{seed}")
    out: list[str] = []
    while len(out) < n:
        a = AREAS[rng.randrange(len(AREAS))]
        out.append(
            _pick(
                rng,
                (
                    f"{_pick(rng, a.concepts)} for {_pick(rng, a.tasks)}",
                    f"how to deal with {_pick(rng, a.challenges)}",
                    f"{_pick(rng, a.tasks)} results on {_pick(rng, a.datasets)}",
                    f"methods that improve {_pick(rng, a.metrics)} in {_pick(rng, a.tasks)}",
                    f"{_pick(rng, a.components)} in {a.field}",
                    f"alternatives to {_pick(rng, a.baselines)} for {_pick(rng, a.applications)}",
                ),
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    from rag_papers import RagPapersError
    from rag_papers.paths import default_home

    p = argparse.ArgumentParser(
        prog="python -m rag_papers.synth", description=__doc__.splitlines()[0] if __doc__ else None
    )
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return run(args, default_home())
    except RagPapersError as exc:
        print(f"synth: error: {exc}", file=sys.stderr)
        return 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("n", type=int, help="number of abstracts (the seeds included)")
    p.add_argument("out", type=Path, help="output .jsonl file")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--no-seeds", action="store_true", help="synthetic abstracts only")
    p.add_argument("--force", action="store_true", help="overwrite OUT if it exists (never inside the data directory)")


def check_target(out: Path, home: Path, force: bool) -> None:
    """Refuse to write where a file would be lost: inside the data directory (its registry, its stores),
    whatever ``force`` says, and over any existing file unless ``force``."""
    from rag_papers import RagPapersError

    target = out.resolve()
    if target == home.resolve() or home.resolve() in target.parents:
        raise RagPapersError(f"{out} is inside the data directory {home}: write the corpus somewhere else")
    if out.exists() or out.is_symlink():
        if out.is_dir():
            raise RagPapersError(f"{out} is a directory: give a file name")
        if not force:
            raise RagPapersError(f"{out} exists: give another name, or --force to overwrite it")


def run(args: argparse.Namespace, home: Path) -> int:
    import time

    from rag_papers import RagPapersError

    if args.n < 1:
        raise RagPapersError("N must be at least 1")
    check_target(Path(args.out), home, args.force)
    t0 = time.perf_counter()
    count = generate(args.n, args.out, args.seed, include_seeds=not args.no_seeds)
    dt = time.perf_counter() - t0
    print(f"wrote {count:,} abstracts to {args.out} in {dt:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
